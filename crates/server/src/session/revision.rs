//! The 2025 revisions a session can speak, and what each one has.

/// A protocol revision negotiated with `initialize`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Revision {
    V2025_03_26,
    V2025_06_18,
    V2025_11_25,
}

impl Revision {
    pub(crate) const ALL: [Self; 3] = [Self::V2025_03_26, Self::V2025_06_18, Self::V2025_11_25];

    pub(crate) fn parse(version: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == version)
    }

    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::V2025_03_26 => "2025-03-26",
            Self::V2025_06_18 => "2025-06-18",
            Self::V2025_11_25 => "2025-11-25",
        }
    }

    /// `elicitation/create` came with 2025-06-18.
    pub(crate) fn has_elicitation(self) -> bool {
        self >= Self::V2025_06_18
    }

    /// URL-mode elicitation (and the `mode` field) came with 2025-11-25.
    pub(crate) fn has_url_elicitation(self) -> bool {
        self >= Self::V2025_11_25
    }

    /// The experimental tasks (`tasks/get`, `tasks/result`, …) of 2025-11-25.
    pub(crate) fn has_tasks(self) -> bool {
        self >= Self::V2025_11_25
    }
}

impl std::fmt::Display for Revision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::Revision;

    #[test]
    fn versions_round_trip_and_features_grow() {
        for r in Revision::ALL {
            assert_eq!(Revision::parse(r.as_str()), Some(r));
        }
        for other in ["2024-11-05", "2026-07-28", "2025-11-25 ", ""] {
            assert_eq!(Revision::parse(other), None, "{other:?}");
        }
        assert!(!Revision::V2025_03_26.has_elicitation());
        assert!(Revision::V2025_06_18.has_elicitation());
        assert!(!Revision::V2025_06_18.has_url_elicitation() && !Revision::V2025_06_18.has_tasks());
        assert!(Revision::V2025_11_25.has_tasks());
    }
}
