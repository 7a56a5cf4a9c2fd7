//! The pages of the browser front end (askama templates in `templates/`) and
//! the words a person reads: titles and messages of errors, the state of a
//! delivery. Every page is rendered here; handlers only fill these structs.

use crate::confirm::flow::{CsError, InputProblems, Internal};
use crate::confirm::seal::EvidenceKind;
use crate::confirm::view::CheqView;
use crate::store::cs::{DecisionRecord, Delivery, Refusal};
use askama::Template;
use chrono::{TimeZone, Utc};
use indexmap::IndexMap;

#[derive(Template)]
#[template(path = "start.html")]
pub struct StartPage<'a> {
    pub user: Option<&'a str>,
    pub csrf: String,
    /// The resource URI of a start link, carried by the form.
    pub resource_uri: &'a str,
    /// The origin of the resource server that asks (a start link's).
    pub asker: Option<&'a str>,
}

#[derive(Template)]
#[template(path = "login.html")]
pub struct LoginPage<'a> {
    pub next: &'a str,
    pub csrf: &'a str,
    pub error: Option<&'a str>,
    pub username: &'a str,
    /// "Sign in with …" links, one per identity provider.
    pub providers: Vec<ProviderLink>,
    /// A line above the form (signed out, sign in again).
    pub notice: Option<String>,
    /// After a logout: the provider's end-session link.
    pub end_session: Option<ProviderLink>,
}

/// A link to sign in (or out) at an identity provider.
#[derive(Debug, Clone)]
pub struct ProviderLink {
    pub name: String,
    pub href: String,
}

#[derive(Template)]
#[template(path = "confirm.html")]
pub struct ConfirmPage<'a> {
    pub id: &'a str,
    pub v: &'a CheqView,
    pub user: &'a str,
    pub csrf: String,
    pub problems: &'a InputProblems,
    pub entered: &'a IndexMap<String, String>,
    pub cs_origin: &'a str,
    /// How long is left until `v.expires`, in words ("in 9 minutes").
    pub expires_in: String,
    /// Whether accepting needs the user's passkey (§14), and whether they
    /// have one.
    pub passkey: PasskeyNeed,
}

/// What a confirmation page says of passkeys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PasskeyNeed {
    /// The request does not ask for one.
    None,
    /// It asks, and the user has a passkey: Accept asks the authenticator.
    Ask,
    /// It asks, and the user has none yet.
    Missing,
}

impl ConfirmPage<'_> {
    pub fn passkey_asked(&self) -> bool {
        self.passkey != PasskeyNeed::None
    }
    pub fn passkey_missing(&self) -> bool {
        self.passkey == PasskeyNeed::Missing
    }
    pub fn error_for(&self, name: &str) -> Option<&str> {
        self.problems.for_field(name)
    }
    pub fn warnings_error(&self) -> Option<&str> {
        self.problems.warnings_unacknowledged.then_some(
            "this request carries warnings: confirm that you have read them before accepting",
        )
    }
    pub fn entered_for(&self, name: &str) -> &str {
        self.entered.get(name).map(String::as_str).unwrap_or("")
    }
}

#[derive(Template)]
#[template(path = "outcome.html")]
pub struct OutcomePage<'a> {
    pub r: &'a DecisionRecord,
    pub user: &'a str,
    pub csrf: String,
    pub earlier: bool,
    pub when: String,
    pub status_line: String,
    /// The evidence link's name (the record id).
    pub evidence_id: String,
    /// What that link gives: the signed document, or redacted evidence.
    pub evidence: EvidenceKind,
}

#[derive(Template)]
#[template(path = "account.html")]
pub struct AccountPage<'a> {
    pub user: &'a str,
    pub csrf: String,
    pub passkeys: Vec<PasskeyRow>,
    /// Signed in recently enough to add or remove a passkey.
    pub recent: bool,
    pub notice: Option<String>,
    /// The confirmation page to go back to (checked: `/c/{id}` of this
    /// service), when one sent the person here to add a passkey.
    pub back: Option<String>,
    /// Where to sign in again (coming back here, with `back`).
    pub reauth: String,
}

/// A passkey as the account page lists it.
pub struct PasskeyRow {
    pub id: String,
    pub name: String,
    pub added: String,
    pub last_used: Option<String>,
}

#[derive(Template)]
#[template(path = "history.html")]
pub struct HistoryPage<'a> {
    pub user: &'a str,
    pub csrf: String,
    pub rows: Vec<HistoryRow>,
    /// How many days decisions are kept (`history_days`); `None`: for good.
    pub kept_days: Option<u32>,
}

pub struct HistoryRow {
    /// The record id (the evidence link's name).
    pub id: String,
    pub operation_name: String,
    pub resource_origin: String,
    pub decision: String,
    pub when: String,
    pub delivery: String,
    /// Its place in the transparency log (§15), once sequenced.
    pub logged: Option<crate::confirm::flow::Logged>,
    /// Whether it has an entry waiting to be sequenced.
    pub queued: bool,
    /// What its evidence link offers ("signed CHEQ", "redacted evidence"),
    /// or `None` when no evidence is kept.
    pub evidence: Option<&'static str>,
    /// Whether the evidence is redacted (§8.1): its private values withheld.
    pub redacted: bool,
}

impl HistoryRow {
    pub fn of(r: DecisionRecord, logged: Option<crate::confirm::flow::Logged>) -> Self {
        use crate::confirm::seal::{evidence_kind, EvidenceKind};
        let kind = evidence_kind(&r);
        HistoryRow {
            evidence: match kind {
                EvidenceKind::Signed => Some("signed CHEQ"),
                EvidenceKind::Redacted => Some("redacted evidence"),
                EvidenceKind::Lost => None,
            },
            redacted: kind == EvidenceKind::Redacted,
            queued: logged.is_none() && r.log_digest.is_some(),
            logged,
            id: r.key().id(),
            when: when(r.decided_at),
            delivery: r.delivery.label().to_owned(),
            operation_name: r.operation_name,
            resource_origin: r.resource_origin,
            decision: r.decision.to_string(),
        }
    }
}

#[derive(Template)]
#[template(path = "error.html")]
pub struct ErrorPage<'a> {
    pub title: &'a str,
    pub message: String,
    pub untrusted: bool,
    pub status: u16,
    /// A way on ("Back to sign in"), if any.
    pub back: Option<ProviderLink>,
}

/// Renders a page; a template failure is an internal error.
pub fn render(t: &impl Template) -> Result<String, CsError> {
    t.render()
        .map_err(|e| CsError::Internal(Internal::Template(e.to_string())))
}

/// A time as pages show it.
pub fn when(ts: i64) -> String {
    Utc.timestamp_opt(ts, 0)
        .single()
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default()
}

/// A length of time in words: "45 seconds", "5 minutes", "2 hours".
pub fn duration_words(secs: i64) -> String {
    let plural = |n: i64, unit: &str| format!("{n} {unit}{}", if n == 1 { "" } else { "s" });
    if secs % 3600 == 0 && secs >= 3600 {
        plural(secs / 3600, "hour")
    } else if secs % 60 == 0 && secs >= 60 {
        plural(secs / 60, "minute")
    } else {
        plural(secs, "second")
    }
}

/// How long is left from `now` until `expires` (RFC 3339), in words, rounded
/// down: "in 9 minutes", "in 2 hours 5 minutes", "in 3 days".
pub fn time_left(expires: &str, now: chrono::DateTime<Utc>) -> String {
    let Ok(t) = chrono::DateTime::parse_from_rfc3339(expires) else {
        return String::new();
    };
    let plural = |n: i64, unit: &str| format!("{n} {unit}{}", if n == 1 { "" } else { "s" });
    match (t.with_timezone(&Utc) - now).num_seconds() {
        s if s <= 0 => "already expired".into(),
        s if s < 60 => "in less than a minute".into(),
        s if s < 3600 => format!("in {}", plural(s / 60, "minute")),
        s if s < 86400 && s % 3600 < 60 => format!("in {}", plural(s / 3600, "hour")),
        s if s < 86400 => format!(
            "in {} {}",
            plural(s / 3600, "hour"),
            plural(s % 3600 / 60, "minute")
        ),
        s => format!("in {}", plural(s / 86400, "day")),
    }
}

/// Words for a delivery state.
pub trait DeliveryLabel {
    /// A short word for pages.
    fn label(&self) -> &'static str;
}

impl DeliveryLabel for Delivery {
    fn label(&self) -> &'static str {
        crate::confirm::view::delivery_label(self)
    }
}

/// The sentence under an outcome.
pub fn status_line(r: &DecisionRecord) -> String {
    match &r.delivery {
        Delivery::Pending { .. } => "Delivery pending: the resource server has not been reached yet. This service keeps trying until it answers or the request expires; you need not do anything.".into(),
        Delivery::Delivered { decision, .. } => format!("Delivered: the resource server recorded the decision ({}).", decision.status_word()),
        Delivery::Refused { refusal: Refusal::ResourceServer { status, error, .. }, .. } => {
            // The RS's words are not ours: its free text is never shown, only
            // its error code, quoted and attributed, when it is a plain code.
            match rs_code(error) {
                Some(code) => format!("The resource server at {} refused the decision (it answered HTTP {status}, “{code}”). It was not carried out.", r.resource_origin),
                None => format!("The resource server at {} refused the decision (it answered HTTP {status}). It was not carried out.", r.resource_origin),
            }
        }
        Delivery::Refused { refusal: Refusal::Unregistered, .. } => "The decision was not sent: the resource server is no longer registered with this service.".into(),
        Delivery::Refused { refusal: Refusal::Unsealable, .. } => "The decision was not sent: its sealed copy could not be opened.".into(),
        Delivery::Expired { .. } => "The request expired before the resource server could be reached; it was not carried out.".into(),
    }
}

/// An RS's `error` code, if it is a plain code worth quoting: at most 40
/// ASCII letters, digits, `_`, `-` or `.`.
fn rs_code(error: &str) -> Option<&str> {
    let plain = !error.is_empty()
        && error.len() <= 40
        && error
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    plain.then_some(error)
}

/// The page title of an error.
pub fn title(e: &CsError) -> &'static str {
    match e {
        CsError::NotRegistered(_) => "Unknown resource server",
        CsError::Blocked { .. } => "Site no longer served",
        CsError::BadRequest(_) => "Bad request",
        CsError::NotFound => "Not found",
        CsError::Csrf => "Form expired",
        CsError::Reauthenticate { .. } => "Sign in again",
        CsError::WrongUser { .. } => "Not your request",
        CsError::Unreachable { .. } => "Resource server unreachable",
        CsError::Timeout { .. } => "Resource server too slow",
        CsError::Untrusted { .. } => "Do not trust this request",
        CsError::KeysPending { .. } => "Try again in a minute",
        CsError::NotCountersignable(_) => "This request cannot be confirmed",
        CsError::Expired(_) => "Request expired",
        CsError::Gone => "Request no longer open",
        CsError::DecidedBefore => "Decided before",
        CsError::UnknownAtRs { .. } => "Unknown request",
        CsError::Changed => "The request changed",
        CsError::TooManyAttempts { .. } => "Too many attempts",
        CsError::MethodNotAllowed => "Method not allowed",
        CsError::PayloadTooLarge => "Too large",
        CsError::Busy => "Busy",
        CsError::Unavailable(_) => "Temporarily unavailable",
        CsError::SigningUnavailable(_) => "Cannot sign right now",
        CsError::Internal(_) => "Something went wrong",
        CsError::Passkey(_) => "Your passkey is needed",
    }
}

/// What a person reads about an error.
pub fn message(e: &CsError) -> String {
    match e {
        CsError::NotRegistered(detail) => format!(
            "This confirmation service does not work for that resource server, so it did not contact it. {detail}"
        ),
        CsError::Blocked { .. } => format!(
            "{}. Its operator stopped confirming requests for that site, so it was not contacted and nothing was signed. Ask that site for another way to confirm.",
            capitalized(&e.to_string())
        ),
        CsError::Csrf => "The form's security token was missing or did not match your session. Go back, reload the page and try again.".into(),
        CsError::Untrusted { origin, reason } => format!(
            "The request that claims to come from {origin} failed verification: {reason}. Nothing was signed. Do not act on it."
        ),
        CsError::NotCountersignable(reason) => format!(
            "The request is missing what is needed to confirm it safely: {reason}."
        ),
        CsError::Reauthenticate { max_age_secs } => format!(
            "This request may only be decided by someone who signed in within the last {}. Sign in again, then review it.",
            crate::confirm::web::pages::duration_words(*max_age_secs)
        ),
        CsError::Changed => "The request is not the one you were shown. Review it again before deciding.".into(),
        CsError::Internal(_) => "The confirmation service had an internal problem. Nothing was signed. Try again later.".into(),
        CsError::Unavailable(_) => "The confirmation service cannot reach its database right now. Nothing was signed. Try again in a moment.".into(),
        CsError::SigningUnavailable(_) => "The confirmation service cannot sign decisions right now: its signing key is not available. Nothing was signed and nothing was sent. Its operator has been told; try again later.".into(),
        other => {
            let mut s = other.to_string();
            if let Some(first) = s.get(..1) {
                let upper = first.to_uppercase();
                s.replace_range(..1, &upper);
            }
            s.push('.');
            s
        }
    }
}

/// The error page of `e`, with status `status`.
pub fn error_page(e: &CsError, status: u16) -> String {
    let page = ErrorPage {
        title: title(e),
        message: message(e),
        untrusted: matches!(e, CsError::Untrusted { .. }),
        status,
        back: None,
    };
    page.render()
        .unwrap_or_else(|_| "<!doctype html><title>Error</title><p>Error</p>".to_owned())
}

/// The page of a failed sign-in at an identity provider.
pub fn login_error_page(e: &crate::confirm::oidc::LoginError, status: u16) -> String {
    use crate::confirm::oidc::LoginError as L;
    let (title, message) = match e {
        L::UnknownProvider(_) => ("Unknown sign-in provider", format!("{}. Choose a way to sign in from the sign-in page.", capitalized(&e.to_string()))),
        L::Unreachable { provider, cause: crate::confirm::oidc::ProviderHttpError::TooLarge { what, .. } } => ("Sign-in provider not usable", format!("{provider} sent a {what} too large to read, so you were not signed in. Try again later, or sign in another way.")),
        L::Unreachable { provider, .. } => ("Sign-in provider unreachable", format!("{provider} could not be reached, so you were not signed in. Try again in a moment, or sign in another way.")),
        L::Misconfigured { provider, .. } => ("Sign-in provider not usable", format!("{provider} is not set up correctly for this service, so you were not signed in. Tell the service's operator.")),
        L::NoPendingLogin => ("Sign-in not recognised", "This sign-in was not started in this browser, or it took longer than 10 minutes. Nothing was stored. Start again from the sign-in page.".to_owned()),
        L::StateMismatch => ("Sign-in not recognised", "The answer from the sign-in provider does not belong to the sign-in started in this browser, so it was refused. Nothing was stored. Start again from the sign-in page.".to_owned()),
        L::Refused { provider, .. } => ("Not signed in", format!("{provider} did not sign you in. Nothing was stored. You can try again.")),
        L::CodeRefused { provider } => ("Sign-in not recognised", format!("{provider} refused the code of this sign-in: it was used already, or it does not belong to this sign-in. Nothing was stored. Start again from the sign-in page.")),
        L::TokenRequest { provider, .. } => ("Sign-in failed", format!("{provider} refused to complete the sign-in. Nothing was stored. Start again from the sign-in page.")),
        L::IdToken { provider, problem } => ("Sign-in refused", format!("The answer that claims to come from {provider} cannot be trusted ({problem}), so you were not signed in. Nothing was stored.")),
        L::EmailTaken { email } => ("E-mail address already in use", format!("The e-mail address {email} already belongs to another account at this service, so this sign-in cannot use it. Sign in with that account instead, or ask the operator.")),
        L::AccountClash(_) => ("Account conflict", "An account of this service already has the name this sign-in maps to. Ask the operator.".to_owned()),
        L::Store { .. } => ("Something went wrong", "The confirmation service could not record your sign-in. Try again in a moment.".to_owned()),
    };
    let page = ErrorPage {
        title,
        message,
        untrusted: false,
        status,
        back: Some(ProviderLink {
            name: "Back to sign in".into(),
            href: "/login".into(),
        }),
    };
    page.render()
        .unwrap_or_else(|_| "<!doctype html><title>Error</title><p>Error</p>".to_owned())
}

fn capitalized(s: &str) -> String {
    let mut out = s.to_owned();
    if let Some(first) = out.get(..1) {
        let upper = first.to_uppercase();
        out.replace_range(..1, &upper);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cheq::{Channel, Decision};

    fn refused(error: &str, description: &str) -> DecisionRecord {
        DecisionRecord {
            nonce: "n".into(),
            user: "alice".into(),
            resource_uri: "https://rs.example/cheq/x".into(),
            resource_origin: "https://rs.example".into(),
            operation: "https://rs.example/op".into(),
            operation_name: "Op".into(),
            decision: Decision::Accept,
            channel: Channel::Html,
            decided_at: 0,
            expires: 600,
            document: "{}".into(),
            delivery: Delivery::Refused {
                refusal: Refusal::ResourceServer {
                    status: 400,
                    error: error.into(),
                    description: description.into(),
                },
                at: 1,
            },
            sealed: false,
            collected_hmac: Default::default(),
            log_digest: None,
        }
    }

    /// A refusal never shows the RS's free text as if the CS said it.
    #[test]
    fn an_rs_refusal_is_attributed_and_its_words_are_not_shown() {
        let alert = "SECURITY ALERT: call us and read out your card PIN";
        let line = status_line(&refused("invalid_cheq", alert));
        assert!(!line.contains("SECURITY"), "{line}");
        assert!(line.contains("The resource server at https://rs.example"));
        assert!(line.contains("“invalid_cheq”"), "{line}");
        let line = status_line(&refused("SECURITY ALERT read out your PIN", ""));
        assert!(
            !line.contains("SECURITY") && !line.contains("PIN"),
            "{line}"
        );
        assert!(line.contains("HTTP 400"), "{line}");
    }

    /// The history says how many entries the checkpoint holds in words a
    /// person reads: "1 entry", "3 entries".
    #[test]
    fn a_checkpoint_of_one_entry_is_said_so() {
        let page = |tree_size: u64| {
            let mut row = HistoryRow::of(
                refused("e", ""),
                Some(crate::confirm::flow::Logged {
                    index: 0,
                    tree_size,
                }),
            );
            row.delivery = "delivered".into();
            render(&HistoryPage {
                user: "alice",
                csrf: "c".into(),
                rows: vec![row],
                kept_days: None,
            })
            .unwrap()
        };
        let one = page(1);
        assert!(one.contains("in the checkpoint of 1 entry "), "{one}");
        assert!(!one.contains("1 entries"), "{one}");
        let three = page(3);
        assert!(three.contains("in the checkpoint of 3 entries "), "{three}");
    }

    #[test]
    fn time_left_in_words() {
        let now = Utc.with_ymd_and_hms(2026, 5, 1, 12, 0, 0).unwrap();
        for (expires, words) in [
            ("2026-05-01T11:59:00Z", "already expired"),
            ("2026-05-01T12:00:00Z", "already expired"),
            ("2026-05-01T12:00:59Z", "in less than a minute"),
            ("2026-05-01T12:01:59Z", "in 1 minute"),
            ("2026-05-01T12:09:30Z", "in 9 minutes"),
            ("2026-05-01T13:00:30Z", "in 1 hour"),
            ("2026-05-01T14:05:00Z", "in 2 hours 5 minutes"),
            ("2026-05-04T13:00:00Z", "in 3 days"),
            ("not a time", ""),
        ] {
            assert_eq!(time_left(expires, now), words, "{expires}");
        }
    }
}
