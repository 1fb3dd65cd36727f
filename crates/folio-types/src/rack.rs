//! Racks (BookKeeper's "network locations"): the one definition of what a rack looks like
//! and of the registration property a bookie publishes it under, shared by the bookie that
//! publishes it and the client whose rack-aware placement reads it.

/// The property under which a bookie publishes its rack in its registration.
pub const RACK_PROPERTY: &str = "rack";

/// Whether `rack` is a network location as BookKeeper writes them: `/a`, `/a/b`, ...
/// (no empty segment, no whitespace).
pub fn valid_rack(rack: &str) -> bool {
    rack.len() > 1
        && rack.starts_with('/')
        && rack[1..].split('/').all(|s| !s.is_empty())
        && !rack.chars().any(char::is_whitespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn racks_are_network_locations() {
        for good in ["/a", "/region-a/rack-1", "/default-rack"] {
            assert!(valid_rack(good), "{good}");
        }
        for bad in ["", "/", "a", "/a/", "/a//b", "/a b", "rack"] {
            assert!(!valid_rack(bad), "{bad:?}");
        }
    }
}
