//! Comparing secrets (client secrets, CSRF tokens) in time that does not
//! depend on where they differ.

use sha2::{Digest, Sha256};

/// Compares two secrets in constant time: their SHA-256 digests are compared
/// with `subtle`, so neither the position of the first difference nor the
/// lengths leak through timing.
pub fn same_secret(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    let (a, b) = (Sha256::digest(a), Sha256::digest(b));
    bool::from(a.as_slice().ct_eq(b.as_slice()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_by_value() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
        assert!(!same_secret(b"", b"a"));
    }
}
