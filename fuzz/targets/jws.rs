//! The JWS parser and verifier on documents as they come off the wire
//! (`verify_resource`, `verify_decision`, PROTOCOL.md §5), against the
//! fixtures' trust store at a fixed time.
//!
//! Properties:
//! - no document passes both as resource-signed and as decided;
//! - an accepted document verifies again identically, and so does what the
//!   verifier writes back out (`to_document`);
//! - accepted ⇒ the envelope holds exactly 1 (or 2) signatures, the payload
//!   is a countersignable CHEQ, each key is trusted for the right origin,
//!   `cheq_rs_sig` is the digest of the resource signature, the CHEQ has not
//!   expired, and the decision is the one asked for (the other is refused);
//! - a decided document's resource part alone verifies as resource-signed;
//! - the context binds: another resource URI, another confirmation URI or a
//!   later time is refused with the matching error;
//! - one changed byte never yields another accepted reading: a mutant that
//!   still verifies carries the same payload, kids and signatures;
//! - the base64url decoder agrees with the `base64` crate's strict one on
//!   every quoted piece of the input.

use super::fixtures::{self, cs_trusted, origin, rs_trusted};
use super::variant;
use cheq::cheq::uri::same_uri;
use cheq::cheq::CountersignFields;
use cheq::sign::jws::RawDocument;
use cheq::sign::{
    assemble, b64, verify_decision, verify_resource, Context, Decision, VerifiedCheq,
    VerifiedDecision, VerifyError,
};
use chrono::Duration;

pub fn run(data: &[u8]) -> u64 {
    same_base64(data);
    check(data, true)
}

/// `b64::decode` (base64-simd) accepts exactly what the `base64` crate's
/// strict unpadded base64url decoder accepts, and reads the same bytes: for
/// every piece of the input between quotes (a document's base64url parts and
/// their mutants).
fn same_base64(data: &[u8]) {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    for piece in String::from_utf8_lossy(data).split('"') {
        assert_eq!(
            b64::decode(piece),
            URL_SAFE_NO_PAD.decode(piece).ok(),
            "base64url decoders differ on {piece:?}"
        );
    }
}

/// Verifies `doc` both ways and checks every property; `mutate` also checks
/// one-byte mutants of an accepted document.
pub fn check(doc: &[u8], mutate: bool) -> u64 {
    let fx = fixtures::get();
    let ctx = Context::at(fixtures::now());
    let r = verify_resource(doc, &fx.trust, &ctx);
    let d = verify_decision(doc, &fx.trust, None, &ctx);
    assert!(
        r.is_err() || d.is_err(),
        "one document verified as resource-signed and as decided"
    );
    if let Ok(v) = &r {
        check_resource(doc, v, &ctx);
        if mutate {
            mutants(doc, |m| {
                if let Ok(w) = verify_resource(m, &fx.trust, &ctx) {
                    assert_eq!(resource_view(&w), resource_view(v), "mutant accepted");
                }
            });
        }
    }
    if let Ok(v) = &d {
        check_decision(doc, v, &ctx);
        if mutate {
            mutants(doc, |m| {
                if let Ok(w) = verify_decision(m, &fx.trust, None, &ctx) {
                    assert_eq!(decision_view(&w), decision_view(v), "mutant accepted");
                }
            });
        }
    }
    variant(0x6a77, &r.map(|_| ())) ^ variant(0x6a78, &d.map(|_| ())).rotate_left(5)
}

/// What an accepted resource-signed document says.
fn resource_view(v: &VerifiedCheq) -> (Vec<u8>, String, String, String) {
    (
        v.cheq().raw().to_vec(),
        v.resource_kid().to_owned(),
        v.rs_sig_digest().to_owned(),
        v.to_document(),
    )
}

/// What an accepted decided document says.
fn decision_view(v: &VerifiedDecision) -> String {
    format!(
        "{:?}|{}|{}|{:?}|{:?}",
        v.cheq().raw(),
        v.resource_kid(),
        v.confirmation_kid(),
        v.claims(),
        v.fields()
    )
}

pub fn check_resource(doc: &[u8], v: &VerifiedCheq, ctx: &Context<'_>) {
    let fx = fixtures::get();
    let again = verify_resource(doc, &fx.trust, ctx);
    let again = again.unwrap_or_else(|e| panic!("accepted once, then refused: {e}"));
    assert_eq!(resource_view(&again), resource_view(v));
    let written = v.to_document();
    let reread = verify_resource(written.as_bytes(), &fx.trust, ctx);
    let reread = reread.unwrap_or_else(|e| panic!("its own writing is refused: {e}"));
    assert_eq!(resource_view(&reread), resource_view(v));

    let raw = RawDocument::parse(doc).unwrap_or_else(|e| panic!("envelope: {e}"));
    assert_eq!(raw.signatures.len(), 1);
    assert_eq!(raw.payload, v.cheq().raw());
    assert_eq!(b64::sha256(&raw.signatures[0].signature), v.rs_sig_digest());
    let f = v.fields();
    assert!(v.cheq().countersign_fields().as_ref() == Ok(f));
    let rs_origin = origin(&f.resource_uri).unwrap_or_default();
    assert!(
        rs_trusted(&rs_origin),
        "resource key accepted for {rs_origin}"
    );
    assert!(fx
        .trust
        .resource_key(&f.resource_uri, v.resource_kid())
        .is_some());
    assert!(
        ctx.now <= f.expires + Duration::seconds(60),
        "expired, accepted"
    );
    check_context(doc, ctx.now, f, |d, c| {
        verify_resource(d, &fx.trust, c).map(|_| ())
    });
}

pub fn check_decision(doc: &[u8], v: &VerifiedDecision, ctx: &Context<'_>) {
    let fx = fixtures::get();
    let again = verify_decision(doc, &fx.trust, None, ctx);
    let again = again.unwrap_or_else(|e| panic!("accepted once, then refused: {e}"));
    assert_eq!(decision_view(&again), decision_view(v));
    let decision = v.decision();
    let other = match decision {
        Decision::Accept => Decision::Reject,
        Decision::Reject => Decision::Accept,
    };
    assert!(verify_decision(doc, &fx.trust, Some(decision), ctx).is_ok());
    assert_eq!(
        verify_decision(doc, &fx.trust, Some(other), ctx).err(),
        Some(VerifyError::DecisionMismatch {
            expected: other,
            found: decision
        })
    );

    let raw = RawDocument::parse(doc).unwrap_or_else(|e| panic!("envelope: {e}"));
    assert_eq!(raw.signatures.len(), 2);
    assert_eq!(raw.payload, v.cheq().raw());
    let claims = v.claims();
    assert_eq!(b64::sha256(&raw.signatures[0].signature), claims.rs_sig);
    assert!(b64::decode(&claims.view).is_some_and(|b| b.len() == 32));
    assert!(!claims.amr.is_empty() && !claims.sub.is_empty());
    assert!(claims.auth_time <= claims.iat + 60);
    let f = v.fields();
    assert!(
        claims.iat <= f.expires.timestamp() + 60,
        "decided after expiry"
    );
    assert!(
        ctx.now <= f.expires + Duration::seconds(60),
        "expired, accepted"
    );
    assert!(rs_trusted(&origin(&f.resource_uri).unwrap_or_default()));
    assert!(cs_trusted(&origin(&f.confirmation_uri).unwrap_or_default()));
    for name in claims.collected.iter().flat_map(|c| c.keys()) {
        let asks = v
            .cheq()
            .parameters
            .iter()
            .any(|p| &p.name == name && p.input.is_some());
        assert!(asks, "collected {name:?}, which asks for no input");
    }
    if decision == Decision::Accept {
        assert!(v
            .cheq()
            .missing_required_input(claims.collected.as_ref())
            .is_none());
    }
    // The resource part alone is a resource-signed CHEQ.
    let rs = &raw.signatures[0];
    let alone = assemble(
        &raw.payload_b64,
        &[(rs.protected_b64.as_ref(), rs.signature_b64.as_ref())],
    );
    let alone = verify_resource(alone.as_bytes(), &fx.trust, ctx);
    let alone = alone.unwrap_or_else(|e| panic!("the resource part alone is refused: {e}"));
    assert_eq!(alone.rs_sig_digest(), claims.rs_sig);
    check_context(doc, ctx.now, f, |d, c| {
        verify_decision(d, &fx.trust, None, c).map(|_| ())
    });
}

/// The context binds the document to a resource URI, a confirmation server
/// and a time.
fn check_context(
    doc: &[u8],
    now: chrono::DateTime<chrono::Utc>,
    f: &CountersignFields,
    verify: impl Fn(&[u8], &Context<'_>) -> Result<(), VerifyError>,
) {
    let bound = Context {
        now,
        resource_uri: Some(&f.resource_uri),
        confirmation_uri: Some(&f.confirmation_uri),
    };
    assert_eq!(verify(doc, &bound), Ok(()));
    let elsewhere = format!("{}x", f.resource_uri);
    let wrong_rs = Context {
        resource_uri: Some(&elsewhere),
        ..bound.clone()
    };
    assert!(matches!(
        verify(doc, &wrong_rs),
        Err(VerifyError::ResourceUriMismatch { .. })
    ));
    // Not `confirmation_uri + "x"`: "http://127.0.0" and "http://127.0.0x"
    // are the same host (127.0.0.0) to a WHATWG URL parser.
    let other_cs = ["https://other-confirm.example", "https://confirm-2.example"]
        .into_iter()
        .find(|o| !same_uri(&f.confirmation_uri, o))
        .unwrap_or_default();
    let wrong_cs = Context {
        confirmation_uri: Some(other_cs),
        ..bound.clone()
    };
    assert!(matches!(
        verify(doc, &wrong_cs),
        Err(VerifyError::ConfirmationUriMismatch { .. })
    ));
    let late = Context::at(f.expires + Duration::seconds(61));
    assert!(matches!(
        verify(doc, &late),
        Err(VerifyError::Expired { .. })
    ));
}

/// Calls `f` on a few one-byte mutants of `doc`, at positions spread over it.
fn mutants(doc: &[u8], mut f: impl FnMut(&[u8])) {
    if doc.is_empty() {
        return;
    }
    let h = super::fnv(doc);
    let mut m = doc.to_vec();
    for k in 0..8u64 {
        let i = (h.rotate_left((k * 8) as u32) % doc.len() as u64) as usize;
        let old = m[i];
        for new in [old ^ 1, old ^ 0x20, b'A', b'_', b' '] {
            if new != old {
                m[i] = new;
                f(&m);
            }
        }
        m[i] = old;
    }
}
