//! A string that never shows up in logs or `Debug` output.

use std::fmt;
use std::str::FromStr;

/// Holds a secret (a database URL with a password, a signing key, a token). `Debug` and
/// `Display` print `***`; the value is only reachable through [`Secret::expose`].
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"***\"")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_prints_the_value() {
        let s = Secret::new("postgres://u:hunter2@h/db");
        assert_eq!(format!("{s:?} {s}"), "\"***\" ***");
        assert_eq!(s.expose(), "postgres://u:hunter2@h/db");
    }
}
