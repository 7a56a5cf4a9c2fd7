//! The RS registering itself at its CS (PROTOCOL.md §16.3): when the CS
//! named by its issuer offers a `registration_endpoint`, the RS posts
//! `{"resource": "<its origin>"}` there at start, through the fetcher of
//! outside URLs, in the background.
//!
//! - `201` or `200`: registered (a second registration refreshes the
//!   record); one line at info says where.
//! - `403` (the CS's operator blocked this origin), `404` (registration is
//!   off there) or `401` (the CS asks for an initial access token, which
//!   this RS does not hold): trying again cannot help; said once at warn,
//!   and the RS stops trying.
//! - anything else (the CS down, `429`, `5xx`, a `400` about a document the
//!   CS could not fetch yet): tried again after 1 s, doubling to 60 s; at
//!   debug for the first minute of failures, then at warn.

use crate::trusted_cs::{failure_level, Backoff, DiscoveredCs};
use cheq_support::outbound::{Outbound, OutboundError};
use std::sync::Weak;

/// Where the RS's registration at its CS stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistrationState {
    /// Not tried yet (the CS's document is not read yet).
    Pending,
    /// The CS's document offers no registration.
    NotOffered,
    /// Registered at `endpoint`.
    Registered { endpoint: String },
    /// Failed `failures` times so far, and tried again.
    Retrying { failures: u32, last: String },
    /// Refused for good with this status (`401`, `403`, `404`): not tried
    /// again.
    Refused { status: u16 },
}

/// What one try came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Registered,
    /// Refused for good (with this status).
    GiveUp(u16),
    /// Worth another try.
    Retry(String),
}

/// What the answer to one registration means.
pub fn outcome(answer: &Result<u16, OutboundError>) -> Outcome {
    match answer {
        Ok(200 | 201) => Outcome::Registered,
        Ok(status) => Outcome::Retry(format!("HTTP {status}")),
        Err(OutboundError::Status(_, status @ (401 | 403 | 404))) => Outcome::GiveUp(*status),
        Err(e) => Outcome::Retry(e.to_string()),
    }
}

/// Posts the registration of `origin` to `endpoint` once; the status.
pub async fn register_once(
    outbound: &Outbound,
    endpoint: &str,
    origin: &str,
) -> Result<u16, OutboundError> {
    let url = outbound.check(endpoint)?;
    let body = serde_json::json!({ "resource": origin }).to_string();
    let request = outbound
        .client()
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(reqwest::header::ACCEPT, "application/json")
        .body(body);
    Ok(outbound.read(endpoint, request).await?.status)
}

/// Registers `origin` at `endpoint` of the CS behind `cs`, trying again as
/// the module docs say, until it is registered, refused for good, or the
/// RS drops the CS.
pub(crate) async fn register_until_done(cs: &Weak<DiscoveredCs>, endpoint: &str, origin: &str) {
    let mut backoff = Backoff::default();
    let mut failing_since = None;
    let mut failures = 0u32;
    loop {
        let Some(here) = cs.upgrade() else { return };
        let answer = register_once(here.outbound(), endpoint, origin).await;
        match outcome(&answer) {
            Outcome::Registered => {
                log::info!("registered {origin} at the confirmation server {endpoint}");
                here.set_registered(endpoint);
                return;
            }
            Outcome::GiveUp(status) => {
                let why = match status {
                    403 => "it has blocked this resource server",
                    404 => "it does not take registrations",
                    _ => "it asks for an initial access token",
                };
                log::warn!(
                    "the confirmation server refused to register {origin} at {endpoint} (HTTP {status}: {why}); not trying again"
                );
                here.set_refused(status);
                return;
            }
            Outcome::Retry(why) => {
                failures += 1;
                let now = here.now();
                let since = *failing_since.get_or_insert(now);
                let wait = backoff.next_wait();
                log::log!(
                    failure_level((now - since).num_seconds()),
                    "registering {origin} at the confirmation server {endpoint}: {why}; trying again in {} s",
                    wait.as_secs()
                );
                here.set_retrying(failures, why);
                drop(here);
                tokio::time::sleep(wait).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_answer_means_what_the_module_says() {
        let status = |s| OutboundError::Status("https://cs.example/r".into(), s);
        assert_eq!(outcome(&Ok(201)), Outcome::Registered);
        assert_eq!(outcome(&Ok(200)), Outcome::Registered);
        assert_eq!(outcome(&Err(status(403))), Outcome::GiveUp(403));
        assert_eq!(outcome(&Err(status(404))), Outcome::GiveUp(404));
        assert_eq!(outcome(&Err(status(401))), Outcome::GiveUp(401));
        for s in [400, 429, 500, 503] {
            assert!(matches!(outcome(&Err(status(s))), Outcome::Retry(_)), "{s}");
        }
        assert!(matches!(
            outcome(&Err(OutboundError::Timeout("x".into()))),
            Outcome::Retry(_)
        ));
        assert!(matches!(outcome(&Ok(202)), Outcome::Retry(_)));
    }
}
