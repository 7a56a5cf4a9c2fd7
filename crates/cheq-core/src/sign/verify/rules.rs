//! The small named checks of §5, rule by rule, each refusing with its own
//! [`VerifyError`] variant. [`super`] chains them.

use super::{Context, ResourceSignature, VerifyError, CLOCK_SKEW_SECS};
use crate::cheq::json::{Node, Object};
use crate::cheq::{Cheq, CountersignFields};
use crate::sign::header::{
    string_member, ConfirmationClaims, Decision, Header, Role, TYP, UNDERSTOOD_CRIT,
};
use crate::sign::jws::{is_document, signing_input, RawDocument, RawSignature};
use crate::sign::keys::{Algorithm, PublicKey};
use crate::sign::{b64, passkey};
use chrono::{DateTime, Utc};
use indexmap::IndexMap;

// ---- rule 1 ---------------------------------------------------------------

pub(super) fn read_payload(
    raw: &RawDocument<'_>,
    ctx: &Context<'_>,
) -> Result<(Cheq, CountersignFields), VerifyError> {
    let cheq = Cheq::parse(&raw.payload).map_err(VerifyError::Payload)?;
    let fields = cheq
        .countersign_fields()
        .map_err(VerifyError::NotCountersignable)?;
    if let Some(expected) = ctx.resource_uri {
        if fields.resource_uri != expected {
            return Err(VerifyError::ResourceUriMismatch {
                expected: expected.to_owned(),
                found: fields.resource_uri.clone(),
            });
        }
    }
    if let Some(expected) = ctx.confirmation_uri {
        if !crate::cheq::uri::same_uri(&fields.confirmation_uri, expected) {
            return Err(VerifyError::ConfirmationUriMismatch {
                expected: expected.to_owned(),
                found: fields.confirmation_uri.clone(),
            });
        }
    }
    Ok((cheq, fields))
}

/// The generic header checks of §5: alg, kid, no embedded keys, no `b64:false`,
/// `crit` understood, `typ`, `cheq_role`.
pub(super) fn check_header<'s>(
    index: usize,
    sig: &'s RawSignature<'_>,
) -> Result<Header<'s>, VerifyError> {
    let m = &sig.header;
    let alg = match string_member(m, "alg") {
        Some("EdDSA") => Algorithm::EdDsa,
        Some("ES256") => Algorithm::Es256,
        other => {
            return Err(VerifyError::AlgorithmNotAllowed {
                index,
                alg: other.map_or_else(|| "(missing)".to_owned(), str::to_owned),
            })
        }
    };
    let kid = match string_member(m, "kid") {
        Some(kid) if !kid.is_empty() => kid.to_owned(),
        _ => return Err(VerifyError::MissingKid { index }),
    };
    for member in ["jwk", "jku", "x5u", "x5c"] {
        if m.contains_key(member) {
            return Err(VerifyError::EmbeddedKey { index, member });
        }
    }
    match m.get("b64") {
        None | Some(Node::Bool(true)) => {}
        Some(_) => return Err(VerifyError::B64False { index }),
    }
    check_crit(index, m)?;
    match string_member(m, "typ") {
        Some(t) if t.eq_ignore_ascii_case(TYP) => {}
        _ => return Err(VerifyError::BadTyp { index }),
    }
    let role = match string_member(m, "cheq_role") {
        Some("resource") => Role::Resource,
        Some("confirmation") => Role::Confirmation,
        _ => return Err(VerifyError::BadRole { index }),
    };
    Ok(Header {
        alg,
        kid,
        role,
        members: m,
    })
}

fn check_crit(index: usize, m: &Object<'_>) -> Result<(), VerifyError> {
    let Some(crit) = m.get("crit") else {
        return Ok(());
    };
    let bad = |reason: &str| VerifyError::BadCrit {
        index,
        reason: reason.to_owned(),
    };
    let Node::Array(names) = crit else {
        return Err(bad("must be an array"));
    };
    if names.is_empty() {
        return Err(bad("must not be empty"));
    }
    let mut seen = Vec::with_capacity(names.len());
    for name in names {
        let Node::String(name) = name else {
            return Err(bad("must list strings"));
        };
        let name: &str = name;
        if !UNDERSTOOD_CRIT.contains(&name) {
            return Err(VerifyError::UnknownCrit {
                index,
                name: name.to_owned(),
            });
        }
        if seen.contains(&name) {
            return Err(bad("lists a name twice"));
        }
        if !m.contains_key(name) {
            return Err(bad(&format!(
                "names \"{name}\", which is not in the header"
            )));
        }
        seen.push(name);
    }
    Ok(())
}

pub(super) fn check_signature(
    index: usize,
    header: &Header<'_>,
    key: &PublicKey,
    sig: &RawSignature<'_>,
    payload_b64: &str,
) -> Result<(), VerifyError> {
    if key.algorithm() != header.alg {
        return Err(VerifyError::AlgorithmKeyMismatch { index });
    }
    if key.verify(
        &signing_input(&sig.protected_b64, payload_b64),
        &sig.signature,
    ) {
        Ok(())
    } else {
        Err(VerifyError::BadSignature {
            index,
            kid: header.kid.clone(),
        })
    }
}

/// The resource signature (entry 0) of a decision: recognised when it is
/// byte-identical to the one in `issued`, the verifier's own document;
/// otherwise verified like any other.
pub(super) fn check_resource_signature(
    header: &Header<'_>,
    key: &PublicKey,
    sig: &RawSignature<'_>,
    payload_b64: &str,
    issued: Option<&str>,
) -> Result<ResourceSignature, VerifyError> {
    let pieces = [(sig.protected_b64.as_ref(), sig.signature_b64.as_ref())];
    if issued.is_some_and(|doc| is_document(doc, payload_b64, &pieces)) {
        if key.algorithm() != header.alg {
            return Err(VerifyError::AlgorithmKeyMismatch { index: 0 });
        }
        return Ok(ResourceSignature::Issued);
    }
    check_signature(0, header, key, sig, payload_b64)?;
    Ok(ResourceSignature::Verified)
}

// ---- rule 2 ---------------------------------------------------------------

pub(super) fn check_count(raw: &RawDocument<'_>, expected: usize) -> Result<(), VerifyError> {
    if raw.signatures.len() == expected {
        Ok(())
    } else {
        Err(VerifyError::SignatureCount {
            expected,
            found: raw.signatures.len(),
        })
    }
}

pub(super) fn check_role(
    index: usize,
    header: &Header<'_>,
    expected: Role,
) -> Result<(), VerifyError> {
    if header.role != expected {
        return Err(VerifyError::RoleOrder {
            index,
            expected: expected.as_str(),
        });
    }
    let has_decision = header.members.contains_key("cheq_decision");
    match expected {
        Role::Resource if has_decision || header.members.contains_key("crit") => {
            Err(VerifyError::BadClaim {
                index,
                member: "cheq_decision",
            })
        }
        Role::Confirmation => {
            let marks_decision = header
                .members
                .get("crit")
                .and_then(Node::as_array)
                .is_some_and(|c| c.iter().any(|n| n.as_str() == Some("cheq_decision")));
            if marks_decision {
                Ok(())
            } else {
                Err(VerifyError::MissingCrit { index })
            }
        }
        Role::Resource => Ok(()),
    }
}

/// Reads every claim §5 requires in a confirmation header.
pub(super) fn read_claims(
    index: usize,
    header: &Header<'_>,
) -> Result<ConfirmationClaims, VerifyError> {
    let m = &header.members;
    let bad = |member: &'static str| VerifyError::BadClaim { index, member };
    let text = |member: &'static str| match string_member(m, member) {
        Some(s) if !s.is_empty() => Ok(s.to_owned()),
        _ => Err(bad(member)),
    };
    let int = |member: &'static str| m.get(member).and_then(Node::as_i64).ok_or(bad(member));
    let digest = |member: &'static str| {
        let s = text(member)?;
        match b64::decode(&s) {
            Some(bytes) if bytes.len() == 32 => Ok(s),
            _ => Err(bad(member)),
        }
    };
    let decision = string_member(m, "cheq_decision")
        .and_then(Decision::parse)
        .ok_or(bad("cheq_decision"))?;
    let amr = match m.get("amr") {
        Some(Node::Array(items)) if !items.is_empty() => items
            .iter()
            .map(|v| v.as_str().filter(|s| !s.is_empty()).map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or(bad("amr"))?,
        _ => return Err(bad("amr")),
    };
    let channel = string_member(m, "cheq_channel")
        .and_then(crate::sign::header::Channel::parse)
        .ok_or(bad("cheq_channel"))?;
    let collected = match m.get("cheq_collected") {
        None => None,
        Some(Node::Object(o)) => Some(
            o.iter()
                .map(|(k, v)| v.as_str().map(|v| (k.to_owned(), v.to_owned())))
                .collect::<Option<IndexMap<_, _>>>()
                .ok_or(bad("cheq_collected"))?,
        ),
        Some(_) => return Err(bad("cheq_collected")),
    };
    let passkey = match m.get("cheq_passkey") {
        None => None,
        Some(Node::Object(o)) => {
            // A passkey assertion binds only if every verifier must check it.
            let critical = matches!(m.get("crit"), Some(Node::Array(names))
                if names.iter().any(|n| n.as_str() == Some("cheq_passkey")));
            if !critical {
                return Err(VerifyError::PasskeyNotCritical { index });
            }
            Some(o.to_map())
        }
        Some(_) => return Err(bad("cheq_passkey")),
    };
    let iat = int("iat")?;
    let auth_time = int("auth_time")?;
    if auth_time > iat + CLOCK_SKEW_SECS {
        return Err(bad("auth_time"));
    }
    Ok(ConfirmationClaims {
        decision,
        sub: text("sub")?,
        iat,
        auth_time,
        amr,
        channel,
        view: digest("cheq_view")?,
        rs_sig: digest("cheq_rs_sig")?,
        collected,
        passkey,
    })
}

// ---- rule 3 ---------------------------------------------------------------

pub(super) fn check_rs_sig(
    claims: &ConfirmationClaims,
    rs: &RawSignature<'_>,
) -> Result<(), VerifyError> {
    if b64::sha256(&rs.signature) == claims.rs_sig {
        Ok(())
    } else {
        Err(VerifyError::RsSigMismatch)
    }
}

pub(super) fn check_decision(
    claims: &ConfirmationClaims,
    expected: Option<Decision>,
) -> Result<(), VerifyError> {
    match expected {
        Some(expected) if expected != claims.decision => Err(VerifyError::DecisionMismatch {
            expected,
            found: claims.decision,
        }),
        _ => Ok(()),
    }
}

pub(super) fn check_collected(claims: &ConfirmationClaims, cheq: &Cheq) -> Result<(), VerifyError> {
    for name in claims.collected.iter().flat_map(|c| c.keys()) {
        let asks = cheq
            .parameters
            .iter()
            .any(|p| &p.name == name && p.input.is_some());
        if !asks {
            return Err(VerifyError::CollectedNotAnInput(name.clone()));
        }
    }
    if claims.decision == Decision::Accept {
        if let Some(p) = cheq.missing_required_input(claims.collected.as_ref()) {
            return Err(VerifyError::RequiredInputMissing(p.name.clone()));
        }
    }
    Ok(())
}

// ---- rule 6 ---------------------------------------------------------------

/// The passkey assertion, when the header carries one or the payload asks
/// for one on an acceptance: well formed, for the challenge of this very
/// decision, at the origin and RP ID of the payload's confirmation URI,
/// with UP and UV, signed by the credential's key.
pub(super) fn check_passkey(
    claims: &ConfirmationClaims,
    cheq: &Cheq,
    fields: &CountersignFields,
) -> Result<(), VerifyError> {
    let member = match &claims.passkey {
        Some(m) => m,
        None if claims.decision == Decision::Accept
            && cheq.assurance == Some(crate::cheq::Assurance::Passkey) =>
        {
            return Err(VerifyError::PasskeyMissing)
        }
        None => return Ok(()),
    };
    passkey::check_member(member, claims, &fields.confirmation_uri)
        .map(|_| ())
        .map_err(VerifyError::Passkey)
}

// ---- rule 4 ---------------------------------------------------------------

pub(super) fn check_not_expired(
    fields: &CountersignFields,
    ctx: &Context<'_>,
) -> Result<(), VerifyError> {
    if ctx.now > fields.expires + chrono::Duration::seconds(CLOCK_SKEW_SECS) {
        return Err(VerifyError::Expired {
            expires: fields.expires,
        });
    }
    Ok(())
}

/// §4: to countersign, `date` is not later than now plus the clock skew. A
/// CHEQ from the future is refused, whatever its expiry says.
pub(super) fn check_not_dated_in_future(
    fields: &CountersignFields,
    ctx: &Context<'_>,
) -> Result<(), VerifyError> {
    if dated_in_future(fields, ctx.now) {
        return Err(VerifyError::DatedInFuture {
            date: fields.date.to_rfc3339(),
            now: ctx.now.to_rfc3339(),
        });
    }
    Ok(())
}

/// Is `date` later than `now` plus the clock skew (§4)? The one place the
/// rule is written; the countersigner asks it too.
pub(crate) fn dated_in_future(fields: &CountersignFields, now: DateTime<Utc>) -> bool {
    fields.date > now + chrono::Duration::seconds(CLOCK_SKEW_SECS)
}

pub(super) fn check_decided_in_time(
    claims: &ConfirmationClaims,
    fields: &CountersignFields,
) -> Result<(), VerifyError> {
    if claims.iat > fields.expires.timestamp() + CLOCK_SKEW_SECS {
        return Err(VerifyError::DecidedAfterExpiry);
    }
    Ok(())
}
