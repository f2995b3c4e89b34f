//! Which Pi's rules apply to a session: 0.85.0 (the seed) or 1.6.0 (what users run now).
//!
//! Why a setting and not a sniff of the file: Pi 1.6.0 still writes header `version: 3`, so
//! nothing in a file says which Pi wrote it, and a file without any 1.6 entry reads the same
//! under both. The rules differ in how the context is projected (edits, system messages, only the
//! newest compaction), how it is estimated, where it is cut, what a summary request carries and
//! what a compaction entry holds. A session's rules come from its settings (`piVersion`), else the
//! daemon's configuration (`[compat] pi_version`), else the default: the Pi people run.
//!
//! `session::signs_of_1_6` finds what only Pi 1.6 writes, so a session read under 0.85's rules
//! can say that it is probably misread.

/// A Pi release whose compaction rules compactd reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PiVersion {
    /// Pi 0.85.0.
    V0_85,
    /// Pi 1.6.0 (the default).
    #[default]
    V1_6,
}

impl PiVersion {
    /// Every version, oldest first (what `initialize` lists).
    pub const ALL: [PiVersion; 2] = [PiVersion::V0_85, PiVersion::V1_6];

    /// The version as settings and flags spell it: `"0.85"` or `"1.6"`.
    pub fn as_str(self) -> &'static str {
        match self {
            PiVersion::V0_85 => "0.85",
            PiVersion::V1_6 => "1.6",
        }
    }

    /// Reads a version as settings and flags spell it; the full release numbers (`0.85.0`,
    /// `1.6.0`) are accepted too. `None` for any other.
    pub fn parse(s: &str) -> Option<PiVersion> {
        match s.trim() {
            "0.85" | "0.85.0" => Some(PiVersion::V0_85),
            "1.6" | "1.6.0" => Some(PiVersion::V1_6),
            _ => None,
        }
    }

    /// Whether 1.6's rules apply (the projection with edits and system messages, the cut
    /// fallback, the request shape, `systemMessage` on compactions).
    pub fn is_1_6(self) -> bool {
        self == PiVersion::V1_6
    }
}

impl std::fmt::Display for PiVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_as_settings_spell_them() {
        assert_eq!(PiVersion::parse("1.6"), Some(PiVersion::V1_6));
        assert_eq!(PiVersion::parse("1.6.0"), Some(PiVersion::V1_6));
        assert_eq!(PiVersion::parse("0.85"), Some(PiVersion::V0_85));
        assert_eq!(PiVersion::parse("0.86"), None);
        assert_eq!(PiVersion::default(), PiVersion::V1_6);
        for v in PiVersion::ALL {
            assert_eq!(PiVersion::parse(v.as_str()), Some(v));
        }
    }
}
