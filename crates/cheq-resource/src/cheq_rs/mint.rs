//! Minting a pending confirmation (§1, §4): ids and nonce, the signed
//! payload, the record kept until it is decided.

use super::{CheqRs, CheqRsError, ID_BYTES, MAX_TTL_SECS, NONCE_BYTES, TIME_BYTES};
use cheq_core::cheq::{Cheq, UriPack};
use cheq_core::sign::b64;
use cheq_store::rs::{CheqRecord, CheqState};
use cheq_store::Durability;
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use rand::RngCore;
use serde_json::{json, Value};
use std::sync::Arc;

/// What to ask the user to confirm.
#[derive(Debug, Clone)]
pub struct MintRequest {
    /// The operation's URI.
    pub operation: String,
    /// Its short human name.
    pub operation_name: String,
    /// The §4 parameter objects, in display order.
    pub parameters: Vec<Value>,
    /// The user at the CS who must confirm.
    pub subject: String,
    /// BCP 47 tag; `en` when `None`.
    pub language: Option<String>,
    /// Lifetime; at most 24 h.
    pub ttl: Duration,
    /// What an acceptance must carry beyond the CS's word (§14): `Some`
    /// for a passkey of the user.
    pub assurance: Option<cheq_core::cheq::Assurance>,
    /// The issuer of the CS the CHEQ names (the user's, §17); `None`: the
    /// RS's default CS.
    pub confirmation_server: Option<String>,
    /// What to run when accepted, given back to
    /// [`Operation::execute`](super::Operation::execute). Stored at rest: it
    /// must not hold anything the user alone may see.
    pub action: Value,
}

/// A pending confirmation just made.
#[derive(Debug, Clone)]
pub struct Minted {
    pub id: String,
    pub result_id: String,
    pub pack: UriPack,
    /// The exact payload bytes that were signed.
    pub payload: Vec<u8>,
    /// The resource-signed document (§5).
    pub document: String,
    pub expires: DateTime<Utc>,
}

/// `n` random bytes after the time `at` ([`TIME_BYTES`]: the low 32 bits of
/// the Unix time in milliseconds, big-endian, which come round every 49.7
/// days, far longer than a record is kept), in base64url. Ids and nonces
/// made in the same 256 ms share their first four characters, so a store
/// keeps records of one time side by side: a confirmation's look-ups touch
/// recent pages, which the cache holds however much older data is kept,
/// and its writes add to the same few pages (sled rewrites a page it
/// changes). With random keys, every look-up in a tree larger than the
/// cache read a page back from disk. The text is not in time order
/// everywhere: base64url's alphabet is not in ASCII's (`z` is followed by
/// `0`), so where a leading character passes from `z` to `0` (and at `9`,
/// `-`, `_`) new keys sort before the ones just made. They still sit
/// together; what this costs is that a tree's keys are not added at one end
/// only, which no store here relies on (BENCHMARKS.md: ids that sort as
/// text, with the rightmost leaf split near its end, bought nothing).
/// The random part alone carries the bits §1 and §4 ask for.
fn ordered_b64(at: DateTime<Utc>, n: usize) -> String {
    let ms = u64::try_from(at.timestamp_millis()).unwrap_or(0);
    let mut bytes = vec![0u8; TIME_BYTES + n];
    bytes[..TIME_BYTES].copy_from_slice(&ms.to_be_bytes()[8 - TIME_BYTES..]);
    rand::rngs::OsRng.fill_bytes(&mut bytes[TIME_BYTES..]);
    b64::encode(bytes)
}

impl CheqRs {
    /// Makes, signs and stores a pending confirmation.
    pub fn mint(&self, req: MintRequest) -> Result<Minted, CheqRsError> {
        self.mint_then(req, Durability::Now)
    }

    /// [`mint`](Self::mint) for an async caller: with a flusher, on the
    /// caller's task, the record written unflushed and then awaited durable;
    /// otherwise on a blocking thread.
    pub async fn mint_async(self: &Arc<Self>, req: MintRequest) -> Result<Minted, CheqRsError> {
        match &self.flusher {
            Some(flusher) => {
                let minted = self.mint_then(req, Durability::Deferred)?;
                flusher.flushed().await?;
                Ok(minted)
            }
            None => self.on_blocking_thread(move |rs| rs.mint(req)).await,
        }
    }

    fn mint_then(&self, req: MintRequest, durability: Durability) -> Result<Minted, CheqRsError> {
        if req.ttl <= Duration::zero() || req.ttl > Duration::seconds(MAX_TTL_SECS) {
            return Err(CheqRsError::Mint("the TTL must be from 1 s to 24 h".into()));
        }
        let issuer = req.confirmation_server.as_deref();
        let cs = self.hosts.get(issuer).ok_or_else(|| {
            CheqRsError::ConfirmationServerUnknown(issuer.unwrap_or_default().to_owned())
        })?;
        let confirmation_uri = cs
            .confirmation_uri()
            .ok_or_else(|| CheqRsError::ConfirmationServerUnknown(cs.origin()))?;
        let now = self.clock.now();
        let date = DateTime::<Utc>::from_timestamp(now.timestamp(), 0).unwrap_or(now);
        let expires = date + req.ttl;
        let id = ordered_b64(now, ID_BYTES);
        let result_id = ordered_b64(now, ID_BYTES);
        let nonce = ordered_b64(now, NONCE_BYTES);
        let resource_uri = self.resource_uri(&id);
        let result_uri = self.result_uri(&result_id);
        let mut payload = json!({
            "version": "1.0",
            "operation": req.operation,
            "operation name": req.operation_name,
            "inputs": {"parameters": req.parameters},
            "date": date.to_rfc3339_opts(SecondsFormat::Secs, true),
            "nonce": nonce,
            "resource uri": resource_uri,
            "confirmation uri": confirmation_uri,
            "subject": req.subject,
            "expires": expires.to_rfc3339_opts(SecondsFormat::Secs, true),
            "language": req.language.unwrap_or_else(|| "en".to_owned()),
        });
        if let (Some(a), Some(map)) = (req.assurance, payload.as_object_mut()) {
            map.insert("assurance".into(), a.as_str().into());
        }
        let payload =
            serde_json::to_vec_pretty(&payload).map_err(|e| CheqRsError::Mint(e.to_string()))?;
        Cheq::parse(&payload).map_err(|e| CheqRsError::Mint(e.to_string()))?;
        let key = self
            .keys
            .signer()
            .map_err(|e| CheqRsError::Keys(e.to_string()))?;
        let document = cheq_core::sign::sign_resource(&payload, &key)?;
        let pack = UriPack::new(confirmation_uri, &resource_uri, &result_uri)
            .map_err(|e| CheqRsError::Mint(e.to_string()))?;
        let record = CheqRecord {
            id: id.clone(),
            result_id: result_id.clone(),
            resource_uri,
            nonce,
            expires: expires.timestamp(),
            document: document.clone(),
            action: req.action,
            state: CheqState::Pending,
        };
        let created = match durability {
            Durability::Now => self.records.create(&record)?,
            Durability::Deferred => self.records.create_with(&record, Durability::Deferred)?,
        };
        if !created {
            return Err(CheqRsError::Mint(
                "a random id is already taken; try again".into(),
            ));
        }
        if let Some(recent) = &self.recent {
            recent.put(&id, record);
        }
        Ok(Minted {
            id,
            result_id,
            pack,
            payload,
            document,
            expires,
        })
    }
}
