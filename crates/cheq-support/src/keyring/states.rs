//! Which key is `new`, `active`, `retiring` or `retired` when (PROTOCOL.md
//! §9), computed from the manifest's times and a time: no I/O and no clock
//! here, so that every instance sharing a key set, given the same manifest,
//! agrees on the key that signs without talking to the others.

use super::KeyRingError;
use cheq_core::sign::KeyState;
use chrono::{DateTime, TimeZone, Utc};
use serde::{Deserialize, Serialize};

/// How long a key stays published after its last signature: the longest
/// CHEQ lifetime (24 h, §4) plus the clock skew (60 s).
pub const RETIRING_SECS: i64 = 24 * 3600 + 60;

/// One key of the manifest.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) kid: String,
    /// The private JWK's file name, in the manifest's folder.
    pub(super) file: String,
    /// Unix seconds.
    pub(super) created: i64,
    /// Unix seconds: it signs from then (if no later key has started).
    pub(super) activates: i64,
    /// Unix seconds: it was told to stop signing then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) retired: Option<i64>,
}

/// The state of every entry at `now`, and when each stopped signing.
pub(super) fn states(entries: &[Entry], now: i64) -> Vec<(KeyState, Option<i64>)> {
    // The active key: the latest to have started (later in the list wins a
    // tie) among those not retired by now.
    let order = |i: usize| (entries[i].activates, i);
    let active = (0..entries.len())
        .filter(|&i| entries[i].activates <= now && entries[i].retired.is_none_or(|r| r > now))
        .max_by_key(|&i| order(i));
    (0..entries.len())
        .map(|i| {
            let e = &entries[i];
            if Some(i) == active {
                return (KeyState::Active, None);
            }
            // Superseded when a key that comes after it in order started.
            let superseded = (0..entries.len())
                .filter(|&j| {
                    order(j) > order(i)
                        && entries[j].activates <= now
                        // A key retired before it started never signed.
                        && entries[j].retired.is_none_or(|r| r > entries[j].activates)
                })
                .map(|j| entries[j].activates)
                .min();
            let retired = e.retired.filter(|&r| r <= now);
            let stopped = match (retired, superseded) {
                (Some(r), Some(s)) => Some(r.min(s)),
                (r, s) => r.or(s),
            };
            match stopped {
                None => (KeyState::New, None),
                Some(s) if now < s.saturating_add(RETIRING_SECS) => (KeyState::Retiring, Some(s)),
                Some(s) => (KeyState::Retired, Some(s)),
            }
        })
        .collect()
}

/// Unix seconds as a date.
pub(super) fn time(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(secs, 0).single().unwrap_or_default()
}

/// Where `kid` is in the manifest.
pub(super) fn index_of(entries: &[Entry], kid: &str) -> Result<usize, KeyRingError> {
    entries
        .iter()
        .position(|e| e.kid == kid)
        .ok_or_else(|| KeyRingError::UnknownKid(kid.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kid: &str, activates: i64, retired: Option<i64>) -> Entry {
        Entry {
            kid: kid.into(),
            file: format!("{kid}.jwk"),
            created: 0,
            activates,
            retired,
        }
    }

    fn state_names(entries: &[Entry], now: i64) -> Vec<&'static str> {
        states(entries, now)
            .iter()
            .map(|(s, _)| s.as_str())
            .collect()
    }

    #[test]
    fn states_follow_the_clock() {
        let set = [entry("a", 0, None), entry("b", 100, None)];
        assert_eq!(state_names(&set, 50), ["active", "new"]);
        assert_eq!(state_names(&set, 100), ["retiring", "active"]);
        assert_eq!(states(&set, 100)[0].1, Some(100));
        assert_eq!(
            state_names(&set, 100 + RETIRING_SECS - 1),
            ["retiring", "active"]
        );
        assert_eq!(
            state_names(&set, 100 + RETIRING_SECS),
            ["retired", "active"]
        );
        // Retired before it was superseded: it stopped then.
        let set = [
            entry("a", 0, Some(30)),
            entry("b", 40, None),
            entry("c", 100, None),
        ];
        assert_eq!(state_names(&set, 50), ["retiring", "active", "new"]);
        assert_eq!(states(&set, 50)[0].1, Some(30));
        // Nothing active: the only key retired.
        assert_eq!(state_names(&[entry("a", 0, Some(10))], 20), ["retiring"]);
        // A new key retired before it started signing.
        let set = [entry("a", 0, None), entry("b", 100, Some(50))];
        assert_eq!(state_names(&set, 60), ["active", "retiring"]);
        // …and it does not cut short the key that went on signing: when a
        // later key starts, that is when the first one stopped.
        let set = [
            entry("a", 0, None),
            entry("b", 100, Some(50)),
            entry("c", 1_000_000, None),
        ];
        let at = 1_000_000 + 10;
        assert_eq!(state_names(&set, at), ["retiring", "retired", "active"]);
        assert_eq!(states(&set, at)[0].1, Some(1_000_000));
    }
}
