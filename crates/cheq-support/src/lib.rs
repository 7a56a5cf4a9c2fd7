//! # cheq-support
//!
//! What cheq's servers share beside the signing core (`cheq-core`) and the
//! store (`cheq-store`), each a small module with one job:
//!
//! - [`time`]: time as a parameter (`Clock`), so that tests of expiry and
//!   replay move a manual clock instead of sleeping.
//! - [`text`]: untrusted text made safe for one line of a log; confirmation
//!   ids; keyed digests that stand for names in logs.
//! - [`keyfile`]: private key and secret files (0600 in a 0700 directory,
//!   generated when missing).
//! - [`keyring`]: a server's own key set (§9): its manifest and key files,
//!   and which key is new, active or retired at a time.
//! - [`peerkeys`]: a peer's published keys (§9): a file, or fetched by
//!   `jwks_uri` with bounded reads and cache headers honoured.
//! - [`outbound`]: the one fetcher of URLs that came from outside (§16.3):
//!   https, bounded, no redirect, refused addresses checked where connected.
//! - [`configfile`]: reading TOML configuration, errors naming the key.
//! - [`bearer`]: access tokens as sealed claims that every instance honours.
//! - [`metrics`]: the Prometheus metrics of both servers.
//! - [`recent`]: a bounded map of recent values.
//! - [`secret`]: secrets whose `Debug` hides them.
//!
//! No web framework here: the HTTP front ends are in the crate `cheq`.
#![forbid(unsafe_code)]

pub mod bearer;
pub mod configfile;
pub mod keyfile;
pub mod keyring;
pub mod metrics;
pub mod outbound;
pub mod peerkeys;
pub mod recent;
pub mod secret;
pub mod text;
pub mod time;
