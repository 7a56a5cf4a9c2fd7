//! Checkpoints (PROTOCOL.md §15.4): C2SP `tlog-checkpoint` text (origin,
//! tree size, base64 root hash) in a C2SP `signed-note`, signed by the
//! log's own Ed25519 note key, whose name is the origin line.
//!
//! Checking one is a chain of named steps, each with its error: the note
//! parses, the log's key signed it, its text is a checkpoint, its origin is
//! the key's name, and its size is one this implementation reads.

use super::{Hash, MAX_TREE_SIZE};
use ed25519_dalek::Signer as _;
use sha2::{Digest, Sha256};
use signed_note::{Note, Signer, StandardVerifier, Verifier as _, VerifierList};
use tlog_tiles::Checkpoint;
use zeroize::Zeroizing;

/// The log's note key: an Ed25519 key named by the log's origin line. It
/// is not, and must not be, the CHEQ signing key. Its `Debug` hides it.
pub struct LogKey {
    origin: String,
    id: u32,
    key: ed25519_dalek::SigningKey,
}

impl std::fmt::Debug for LogKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogKey")
            .field("origin", &self.origin)
            .field("key", &"<redacted>")
            .finish()
    }
}

/// Why a key, a note or a checkpoint was refused.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("the origin {0:?} is not a signed-note key name (no spaces, no '+')")]
    BadOrigin(String),
    #[error("the verifier key is malformed: {0}")]
    BadVerifierKey(String),
    #[error("the checkpoint is not a signed note: {0}")]
    NotANote(String),
    #[error("the checkpoint is not signed by the log's key: {0}")]
    BadSignature(String),
    #[error("the signed text is not a checkpoint")]
    NotACheckpoint,
    #[error("the checkpoint's origin {found:?} is not the key's name {expected:?}")]
    WrongOrigin { expected: String, found: String },
    #[error("the checkpoint's tree size {0} is beyond what this verifier reads")]
    TooLarge(u64),
    #[error("could not sign the checkpoint: {0}")]
    Signing(String),
}

impl LogKey {
    /// The key derived from a secret file's bytes (32 or more random bytes),
    /// for the log whose origin line is `origin`.
    pub fn from_secret(secret: &[u8], origin: &str) -> Result<LogKey, CheckpointError> {
        if !signed_note::is_key_name_valid(origin) {
            return Err(CheckpointError::BadOrigin(origin.to_owned()));
        }
        let mut h = Sha256::new();
        h.update(b"cheq log note key v1\0");
        h.update(secret.trim_ascii());
        let seed: Zeroizing<[u8; 32]> = Zeroizing::new(h.finalize().into());
        let key = ed25519_dalek::SigningKey::from_bytes(&seed);
        let public = [&[1u8][..], key.verifying_key().as_bytes()].concat();
        Ok(LogKey {
            id: signed_note::key_id(origin, &public),
            origin: origin.to_owned(),
            key,
        })
    }

    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The verifier key in the signed-note text form,
    /// `<name>+<hex key hash>+<base64 key>`.
    pub fn verifier_key(&self) -> String {
        signed_note::new_ed25519_verifier_key(&self.origin, &self.key.verifying_key())
    }

    /// The signed checkpoint of a tree of `size` with root `root`.
    pub fn sign(&self, size: u64, root: &Hash) -> Result<SignedCheckpoint, CheckpointError> {
        let text = Checkpoint::new(&self.origin, size, *root, "")
            .map_err(|_| CheckpointError::BadOrigin(self.origin.clone()))?
            .to_bytes();
        let mut note =
            Note::new(&text, &[]).map_err(|e| CheckpointError::Signing(e.to_string()))?;
        note.add_sigs(&[self])
            .map_err(|e| CheckpointError::Signing(e.to_string()))?;
        Ok(SignedCheckpoint {
            size,
            root: *root,
            note: note.to_bytes(),
        })
    }
}

impl Signer for LogKey {
    fn name(&self) -> &str {
        &self.origin
    }
    fn key_id(&self) -> u32 {
        self.id
    }
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, signature::Error> {
        Ok(self.key.sign(msg).to_bytes().to_vec())
    }
}

/// A checkpoint the log's key signed: its tree and the note's bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct SignedCheckpoint {
    pub size: u64,
    pub root: Hash,
    /// The whole signed note, as served at `<prefix>/checkpoint`.
    pub note: Vec<u8>,
}

/// Checks checkpoints against one verifier key.
pub struct LogVerifier {
    verifier: StandardVerifier,
    vkey: String,
}

impl std::fmt::Debug for LogVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.vkey)
    }
}

impl LogVerifier {
    /// The verifier of a signed-note verifier key (text form).
    pub fn new(vkey: &str) -> Result<LogVerifier, CheckpointError> {
        let vkey = vkey.trim();
        let verifier = StandardVerifier::new(vkey)
            .map_err(|e| CheckpointError::BadVerifierKey(e.to_string()))?;
        Ok(LogVerifier {
            verifier,
            vkey: vkey.to_owned(),
        })
    }

    /// The log's origin: the key's name.
    pub fn origin(&self) -> &str {
        self.verifier.name()
    }

    /// Checks a served checkpoint, step by step.
    pub fn verify(&self, note: &[u8]) -> Result<SignedCheckpoint, CheckpointError> {
        let parsed = parse_note(note)?;
        signed_by_the_log(&parsed, &self.verifier)?;
        let checkpoint = checkpoint_text(&parsed)?;
        origin_is_the_keys(&checkpoint, self.origin())?;
        size_is_readable(&checkpoint)?;
        Ok(SignedCheckpoint {
            size: checkpoint.size(),
            root: *checkpoint.hash(),
            note: note.to_vec(),
        })
    }
}

fn parse_note(note: &[u8]) -> Result<Note, CheckpointError> {
    Note::from_bytes(note).map_err(|e| CheckpointError::NotANote(e.to_string()))
}

fn signed_by_the_log(note: &Note, verifier: &StandardVerifier) -> Result<(), CheckpointError> {
    let list = VerifierList::new(vec![Box::new(verifier.clone())]);
    note.verify(&list)
        .map(|_| ())
        .map_err(|e| CheckpointError::BadSignature(e.to_string()))
}

fn checkpoint_text(note: &Note) -> Result<Checkpoint, CheckpointError> {
    Checkpoint::from_bytes(note.text()).map_err(|_| CheckpointError::NotACheckpoint)
}

fn origin_is_the_keys(c: &Checkpoint, name: &str) -> Result<(), CheckpointError> {
    if c.origin() != name {
        return Err(CheckpointError::WrongOrigin {
            expected: name.to_owned(),
            found: c.origin().to_owned(),
        });
    }
    Ok(())
}

fn size_is_readable(c: &Checkpoint) -> Result<(), CheckpointError> {
    if c.size() > MAX_TREE_SIZE {
        return Err(CheckpointError::TooLarge(c.size()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(origin: &str) -> LogKey {
        LogKey::from_secret(b"0123456789abcdef0123456789abcdef", origin).unwrap()
    }

    #[test]
    fn a_signed_checkpoint_verifies_under_its_key_and_reads_as_c2sp_says() {
        let k = key("cs.example/cheq-log");
        let root = Hash([7; 32]);
        let c = k.sign(5, &root).unwrap();
        let text = String::from_utf8(c.note.clone()).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("cs.example/cheq-log"));
        assert_eq!(lines.next(), Some("5"));
        assert_eq!(
            lines.next(),
            Some("BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=")
        );
        assert_eq!(lines.next(), Some(""));
        assert!(lines.next().unwrap().starts_with("— cs.example/cheq-log "));
        let vkey = k.verifier_key();
        assert!(vkey.starts_with("cs.example/cheq-log+"), "{vkey}");
        let v = LogVerifier::new(&vkey).unwrap();
        assert_eq!(v.verify(&c.note).unwrap(), c);
    }

    #[test]
    fn every_step_of_the_check_refuses_what_it_should() {
        let k = key("cs.example/cheq-log");
        let v = LogVerifier::new(&k.verifier_key()).unwrap();
        let c = k.sign(5, &Hash([7; 32])).unwrap();

        let other =
            LogKey::from_secret(b"another secret, 32 bytes or more!", "cs.example/cheq-log")
                .unwrap()
                .sign(5, &Hash([7; 32]))
                .unwrap();
        assert!(matches!(
            v.verify(&other.note),
            Err(CheckpointError::BadSignature(_))
        ));

        let text = String::from_utf8(c.note.clone()).unwrap();
        let bent = text.replacen("\n5\n", "\n6\n", 1);
        assert!(matches!(
            v.verify(bent.as_bytes()),
            Err(CheckpointError::BadSignature(_))
        ));
        assert!(matches!(
            v.verify(b"no note"),
            Err(CheckpointError::NotANote(_))
        ));

        // Signed by the right key, but not a checkpoint, or another origin's.
        let mut note = Note::new(b"just text\n", &[]).unwrap();
        note.add_sigs(&[&k]).unwrap();
        assert!(matches!(
            v.verify(&note.to_bytes()),
            Err(CheckpointError::NotACheckpoint)
        ));
        let foreign = Checkpoint::new("elsewhere/log", 1, Hash([1; 32]), "").unwrap();
        let mut note = Note::new(&foreign.to_bytes(), &[]).unwrap();
        note.add_sigs(&[&k]).unwrap();
        assert!(matches!(
            v.verify(&note.to_bytes()),
            Err(CheckpointError::WrongOrigin { .. })
        ));
        let huge = k.sign(MAX_TREE_SIZE + 1, &Hash([1; 32])).unwrap();
        assert!(matches!(
            v.verify(&huge.note),
            Err(CheckpointError::TooLarge(_))
        ));

        assert!(matches!(
            LogVerifier::new("nonsense"),
            Err(CheckpointError::BadVerifierKey(_))
        ));
        assert!(matches!(
            LogKey::from_secret(b"0123456789abcdef0123456789abcdef", "has space"),
            Err(CheckpointError::BadOrigin(_))
        ));
    }

    #[test]
    fn its_debug_hides_the_key() {
        let shown = format!("{:?}", key("cs.example/cheq-log"));
        assert!(shown.contains("<redacted>") && !shown.contains("key: SigningKey"));
    }
}
