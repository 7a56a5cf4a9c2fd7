//! The confirmed action a [`CheqRs`](super::CheqRs) runs once per confirmation,
//! and where it keeps its effect.

use indexmap::IndexMap;
use serde_json::Value;

/// Where an [`Operation`] keeps its effect, which decides when the RS makes
/// a decision's nonce durable (the [`cheq_rs`](super) docs, "Exactly once").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Outside the RS's store (another service, another database): the
    /// nonce is on disk before the operation runs, so that no crash can
    /// forget a decision whose effect happened.
    Elsewhere,
    /// In the RS's own store (the [`RsStore`](cheq_store::rs::RsStore) given
    /// to [`CheqRs::new`](super::CheqRs::new)), written without a flush of its
    /// own
    /// ([`Executions::record_with`](cheq_store::rs::Executions::record_with), deferred):
    /// the nonce, the `decided` state, the effect and the final state are then
    /// written in that order and made durable together, by one flush with the
    /// final state, before the answer. A crash keeps a prefix of them, which a
    /// re-delivery completes, as it completes one cut short by a crash between
    /// durable steps. On a store with a flusher (sled),
    /// [`CheqRs::decide_async`](super::CheqRs::decide_async) runs such an
    /// operation on the server's async task and writes no `decided` state (the
    /// [`cheq_rs`](super) docs, "Awaited durability"): it must not wait on
    /// anything but the store.
    InStore,
}

/// The confirmed action. Runs once per confirmation (see the [`cheq_rs`](super)
/// docs).
pub trait Operation: Send + Sync + 'static {
    /// Where the effect is kept. [`Effect::Elsewhere`] unless the operation
    /// writes it, unflushed, to the RS's own store.
    fn effect(&self) -> Effect {
        Effect::Elsewhere
    }

    /// Runs `action` (the opaque value given to
    /// [`CheqRs::mint`](super::CheqRs::mint)) with the values the user supplied
    /// (§8). MUST be idempotent per `key` (the confirmation id): called again
    /// with the same key, it must not repeat the effect and must return the
    /// same result. The result is what the agent reads (§7): it MUST NOT
    /// contain any of the `collected` values.
    fn execute(
        &self,
        key: &str,
        action: &Value,
        collected: &IndexMap<String, String>,
    ) -> Result<Value, String>;
}
