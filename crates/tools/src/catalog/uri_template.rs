//! URI templates of resource templates: RFC 6570 level 1 (`{name}` simple expansion),
//! matched against a concrete URI to read it.

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Var(String),
}

/// A parsed `uriTemplate` such as `test://template/{id}/data`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UriTemplate {
    source: String,
    parts: Vec<Part>,
}

impl UriTemplate {
    /// Parses a level-1 template; operators (`{+x}`, `{?x}`, …) and unbalanced braces
    /// are refused, since matching them back is ambiguous.
    pub fn parse(source: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut rest = source;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Literal(rest[..open].to_owned()));
            }
            let close = rest[open..]
                .find('}')
                .ok_or_else(|| format!("uriTemplate {source:?} has an unclosed '{{'"))?;
            let name = &rest[open + 1..open + close];
            let valid = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
            if !valid {
                return Err(format!(
                    "uriTemplate {source:?}: {{{name}}} is not a simple variable"
                ));
            }
            if matches!(parts.last(), Some(Part::Var(_))) {
                return Err(format!(
                    "uriTemplate {source:?} has two variables with nothing between them"
                ));
            }
            parts.push(Part::Var(name.to_owned()));
            rest = &rest[open + close + 1..];
        }
        if rest.contains('}') {
            return Err(format!("uriTemplate {source:?} has an unmatched '}}'"));
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_owned()));
        }
        Ok(Self {
            source: source.to_owned(),
            parts,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The variable names, in order.
    pub fn variables(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Var(v) => Some(v.as_str()),
            Part::Literal(_) => None,
        })
    }

    /// The variables' values when `uri` is an expansion of this template. A value is a
    /// non-empty run of characters without `/`, `?` or `#` (simple expansion escapes
    /// them), ended by the next literal.
    pub fn matches(&self, uri: &str) -> Option<BTreeMap<String, String>> {
        let mut values = BTreeMap::new();
        let mut rest = uri;
        let mut parts = self.parts.iter().peekable();
        while let Some(part) = parts.next() {
            match part {
                Part::Literal(lit) => rest = rest.strip_prefix(lit.as_str())?,
                Part::Var(name) => {
                    let end = match parts.peek() {
                        Some(Part::Literal(next)) => rest.find(next.as_str())?,
                        _ => rest.len(),
                    };
                    let value = &rest[..end];
                    if value.is_empty() || value.contains(['/', '?', '#']) {
                        return None;
                    }
                    values.insert(name.clone(), value.to_owned());
                    rest = &rest[end..];
                }
            }
        }
        rest.is_empty().then_some(values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_simple_variables() {
        let t = UriTemplate::parse("test://template/{id}/data").unwrap();
        assert_eq!(t.variables().collect::<Vec<_>>(), ["id"]);
        assert_eq!(t.matches("test://template/123/data").unwrap()["id"], "123");
        for miss in [
            "test://template//data",
            "test://template/1/2/data",
            "test://template/123/data/more",
            "test://other/123/data",
        ] {
            assert_eq!(t.matches(miss), None, "{miss}");
        }
        let tail = UriTemplate::parse("file:///{name}").unwrap();
        assert_eq!(tail.matches("file:///a.txt").unwrap()["name"], "a.txt");
    }

    #[test]
    fn refuses_what_cannot_be_matched_back() {
        for bad in ["x/{+path}", "x/{a}{b}", "x/{", "x/}", "x/{}"] {
            assert!(UriTemplate::parse(bad).is_err(), "{bad}");
        }
    }
}
