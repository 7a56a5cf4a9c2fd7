//! The named checks of redacted evidence (see the parent module): each
//! reads one part of the file and fails with its own [`EvidenceError`].

use super::*;

pub(super) fn bad(member: &'static str, reason: &'static str) -> EvidenceError {
    EvidenceError::BadMember { member, reason }
}

pub(super) fn member<'o, 'a>(
    o: &'o Object<'a>,
    name: &'static str,
) -> Result<&'o Node<'a>, EvidenceError> {
    o.get(name).ok_or(EvidenceError::MissingMember(name))
}

/// The file is a signed envelope: not a bare statement (the stored form),
/// not the older shape, and with a signature.
pub(super) fn check_signed(bytes: &[u8]) -> Result<(), EvidenceError> {
    let o = json::parse_node_object(bytes, MAX_EVIDENCE_BYTES).map_err(EvidenceError::Json)?;
    if !o.contains_key("payload") && !o.contains_key("signatures") {
        if o.contains_key("format") || o.contains_key("redacted") {
            check_format(&o)?;
            return Err(EvidenceError::Unsigned);
        }
        if o.contains_key("resource_signed") {
            return Err(EvidenceError::Unsigned);
        }
    }
    match o.get("signatures") {
        None => Err(EvidenceError::SignatureMissing),
        Some(Node::Array(list)) if list.is_empty() => Err(EvidenceError::SignatureMissing),
        Some(_) => Ok(()),
    }
}

/// The evidence header: its role, its `typ`, nothing but its four members,
/// an allowed algorithm, a key id.
pub(super) fn check_header(sig: &RawSignature<'_>) -> Result<(Algorithm, String), EvidenceError> {
    let h = &sig.header;
    let text = |name: &str| h.get(name).and_then(Node::as_str);
    if text("cheq_role") != Some(ROLE) {
        return Err(EvidenceError::WrongRole {
            found: h.get("cheq_role").map(|r| match r.as_str() {
                Some(r) => r.to_owned(),
                None => r.to_value().to_string(),
            }),
        });
    }
    if !text("typ").is_some_and(|t| t.eq_ignore_ascii_case(TYP)) {
        return Err(EvidenceError::WrongType);
    }
    if let Some(other) = h.keys().find(|k| !HEADER_MEMBERS.contains(k)) {
        return Err(EvidenceError::HeaderMember(other.to_owned()));
    }
    let alg = match text("alg") {
        Some("EdDSA") => Algorithm::EdDsa,
        Some("ES256") => Algorithm::Es256,
        other => {
            return Err(EvidenceError::AlgorithmNotAllowed(
                other.map_or_else(|| "(missing)".to_owned(), str::to_owned),
            ))
        }
    };
    match text("kid") {
        Some(kid) if !kid.is_empty() => Ok((alg, kid.to_owned())),
        _ => Err(EvidenceError::MissingKid),
    }
}

/// The format names this one, or says what it is instead.
pub(super) fn check_format(o: &Object<'_>) -> Result<(), EvidenceError> {
    let Some(format) = o.get("format") else {
        if o.contains_key("redacted") {
            return Err(EvidenceError::Unversioned);
        }
        return Err(EvidenceError::MissingMember("format"));
    };
    match format.as_str() {
        Some(FORMAT) => Ok(()),
        Some(f) if f.starts_with(FAMILY) => Err(EvidenceError::UnknownVersion(f.to_owned())),
        Some(f) => Err(EvidenceError::UnknownFormat(f.to_owned())),
        None => Err(bad("format", "is not a string")),
    }
}

/// A digest: 32 bytes, canonical unpadded base64url.
pub(super) fn digest_of(name: &str, node: Option<&Node<'_>>) -> Result<String, EvidenceError> {
    match node.and_then(Node::as_str) {
        Some(d) if d.len() == DIGEST_CHARS && b64::decode(d).is_some() => Ok(d.to_owned()),
        _ => Err(EvidenceError::BadDigest(name.to_owned())),
    }
}

/// The CHEQ's members, read to know whose signature to check: nothing is
/// verified here ([`check_resource_signed`] does it).
pub(super) fn cheq_fields(resource_signed: &str) -> Result<CountersignFields, EvidenceError> {
    let raw =
        RawDocument::parse(resource_signed.as_bytes()).map_err(EvidenceError::ResourceSigned)?;
    let cheq = Cheq::parse(&raw.payload)
        .map_err(|e| EvidenceError::ResourceSigned(VerifyError::Payload(e)))?;
    cheq.countersign_fields()
        .map_err(|e| EvidenceError::ResourceSigned(VerifyError::NotCountersignable(e)))
}

/// The confirmation service's signature over the statement's exact bytes,
/// with a key the trust gives the confirmation server at the origin of the
/// CHEQ's `confirmation uri`; a key trusted only for another origin is
/// told apart from one no one trusts.
pub(super) fn check_signature(
    evidence: &SignedEvidence,
    trust: &TrustStore,
    fields: &CountersignFields,
) -> Result<(), EvidenceError> {
    let kid = &evidence.kid;
    let input = signing_input(&evidence.protected_b64, &evidence.payload_b64);
    let signs = |key: &crate::sign::PublicKey| {
        key.algorithm() == evidence.alg && key.verify(&input, &evidence.signature)
    };
    let Some(key) = trust.confirmation_key_at(&fields.confirmation_origin, kid) else {
        let elsewhere = trust
            .confirmation_keys_named(kid)
            .into_iter()
            .find(|(_, key)| signs(key));
        return Err(match elsewhere {
            Some((origin, _)) => EvidenceError::AnotherOrigin {
                kid: kid.clone(),
                origin: origin.ascii_serialization(),
                confirmation_uri: fields.confirmation_uri.clone(),
            },
            None => EvidenceError::UntrustedKey {
                kid: kid.clone(),
                confirmation_uri: fields.confirmation_uri.clone(),
            },
        });
    };
    if key.algorithm() != evidence.alg {
        return Err(EvidenceError::AlgorithmKeyMismatch { kid: kid.clone() });
    }
    if signs(&key) {
        Ok(())
    } else {
        Err(EvidenceError::BadSignature { kid: kid.clone() })
    }
}

/// The resource-signed CHEQ passes rules 1, 2 and 4, its lifetime checked
/// at the decision time the evidence states.
pub(super) fn check_resource_signed(
    evidence: &RedactedEvidence,
    trust: &TrustStore,
) -> Result<VerifiedCheq, EvidenceError> {
    let at = rfc3339(evidence.decided_at);
    verify_resource(
        evidence.resource_signed.as_bytes(),
        trust,
        &Context::at(evidence.decided_at),
    )
    .map_err(|e| match e {
        VerifyError::Expired { expires } => EvidenceError::DecidedAfterExpiry {
            decided_at: at,
            expires: rfc3339(expires),
        },
        VerifyError::DatedInFuture { date, .. } => EvidenceError::DecidedBeforeDate {
            decided_at: at,
            date,
        },
        e => EvidenceError::ResourceSigned(e),
    })
}

/// The collected names are inputs the CHEQ asks for; an acceptance names
/// every required one, a rejection none.
pub(super) fn check_collected(
    evidence: &RedactedEvidence,
    cheq: &VerifiedCheq,
) -> Result<(), EvidenceError> {
    let parameters = &cheq.cheq().parameters;
    for name in evidence.collected.keys() {
        if !parameters
            .iter()
            .any(|p| &p.name == name && p.input.is_some())
        {
            return Err(EvidenceError::CollectedNotAnInput(name.clone()));
        }
    }
    match evidence.decision {
        Decision::Accept => match cheq
            .cheq()
            .missing_required_input(Some(&evidence.collected))
        {
            Some(p) => Err(EvidenceError::RequiredInputMissing(p.name.clone())),
            None => Ok(()),
        },
        Decision::Reject if !evidence.collected.is_empty() => Err(EvidenceError::CollectedOnReject),
        Decision::Reject => Ok(()),
    }
}
