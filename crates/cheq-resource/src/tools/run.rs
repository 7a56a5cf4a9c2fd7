//! Running the demo tools ([`DemoTools`]), idempotent per key as
//! [`Operation`] requires: the result is stored under the key in the one
//! atomic write of the execution log ([`Executions::record`]) that stands
//! for the effect. That log is in the RS's own store ([`Effect::InStore`]):
//! a confirmed run's write is made durable by the RS with the decision's
//! final state; a run that needs no confirmation flushes its own. A change
//! of a user's CS or rules (§17) is applied by [`crate::settings::apply`],
//! its settings and its result written together.

use super::{Tool, ToolError};
use crate::cheq_rs::{Effect, Operation};
use cheq_store::rs::Settings;
use cheq_store::rs::{Execution, Executions, RsStore};
use cheq_store::Durability;
use indexmap::IndexMap;
use rand::RngCore;
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Runs the demo tools; idempotent per key (see the module docs).
pub struct DemoTools {
    executions: Arc<dyn Executions>,
    /// Each user's CS and rules (§17): what a confirmed change writes.
    settings: Arc<dyn Settings>,
    runs: AtomicU64,
    executed: Option<prometheus::IntCounter>,
}

impl std::fmt::Debug for DemoTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DemoTools")
            .field("runs", &self.runs)
            .finish_non_exhaustive()
    }
}

fn outputs(pairs: &[(&str, Value)]) -> Value {
    json!({"output_parameters": pairs.iter().map(|(n, v)| json!({"name": n, "value": v})).collect::<Vec<_>>()})
}

fn is_digits(s: &str, min: usize, max: usize) -> bool {
    (min..=max).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit())
}

fn is_amount(s: &str) -> bool {
    let (whole, cents) = s.split_once('.').unwrap_or((s, "00"));
    is_digits(whole, 1, 12) && is_digits(cents, 1, 2)
}

impl DemoTools {
    /// The demo tools, keeping their execution log in `store`, the RS's own
    /// store: the one given to the [`CheqRs`](super::cheq_rs::CheqRs) that
    /// runs them, since their [`Effect`] is [`Effect::InStore`].
    pub fn new(store: &RsStore) -> Self {
        DemoTools {
            executions: store.executions.clone(),
            settings: store.settings.clone(),
            runs: AtomicU64::new(0),
            executed: None,
        }
    }

    /// Also counts every operation that ran in `counter` (a metric).
    pub fn counting(mut self, counter: prometheus::IntCounter) -> Self {
        self.executed = Some(counter);
        self
    }

    /// How many times an operation actually ran (not counting idempotent repeats).
    pub fn runs(&self) -> u64 {
        self.runs.load(Ordering::SeqCst)
    }

    /// Counts an operation that ran.
    fn ran(&self) {
        self.runs.fetch_add(1, Ordering::SeqCst);
        if let Some(c) = &self.executed {
            c.inc();
        }
    }

    /// Runs an invocation that needs no confirmation.
    pub fn run_now(
        &self,
        tool: &Tool,
        inputs: &IndexMap<String, Value>,
    ) -> Result<Value, ToolError> {
        let mut key = [0u8; 16];
        rand::rngs::OsRng.fill_bytes(&mut key);
        let inputs: Map<String, Value> =
            inputs.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        // Its result is the answer: durable before it is given.
        self.run(
            &format!("direct-{}", cheq_core::sign::b64::encode(key)),
            &json!({"tool": tool.name, "inputs": inputs}),
            &IndexMap::new(),
            Durability::Now,
        )
        .map_err(ToolError::Failed)
    }

    /// Runs `action` once per `key`. The stored result is the effect: one
    /// atomic write, which keeps the first result under `key` and answers it
    /// to any later run, so the log is not read first; on disk before this
    /// returns with [`Durability::Now`]. A run that fails gives way to one that stored
    /// its result before.
    fn run(
        &self,
        key: &str,
        action: &Value,
        collected: &IndexMap<String, String>,
        durability: Durability,
    ) -> Result<Value, String> {
        if action["tool"]
            .as_str()
            .is_some_and(crate::settings::is_settings_tool)
        {
            let (result, fresh) =
                crate::settings::apply(self.settings.as_ref(), key, action, durability)?;
            if fresh {
                self.ran();
            }
            return Ok(result);
        }
        let durable = durability == Durability::Now;
        let result = match Self::perform(action, collected) {
            Ok(result) => result,
            Err(e) => {
                return match self.executions.get(key).map_err(|e| e.to_string())? {
                    Some(done) => Ok(done),
                    None => Err(e),
                }
            }
        };
        let stored = if durable {
            self.executions.record(key, &result)
        } else {
            self.executions
                .record_with(key, &result, Durability::Deferred)
        };
        match stored.map_err(|e| e.to_string())? {
            Execution::Fresh => {
                self.ran();
                Ok(result)
            }
            Execution::Existing(earlier) => Ok(earlier),
        }
    }

    fn perform(action: &Value, collected: &IndexMap<String, String>) -> Result<Value, String> {
        let inputs = &action["inputs"];
        match action["tool"].as_str() {
            Some("book_flight") => {
                let mut r = [0u8; 4];
                rand::rngs::OsRng.fill_bytes(&mut r);
                let reference: String = r
                    .iter()
                    .map(|b| char::from(b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789"[usize::from(b % 32)]))
                    .collect();
                Ok(outputs(&[
                    ("booking_reference", Value::from(reference)),
                    ("status", Value::from("CONFIRMED")),
                    ("flight_number", inputs["flight_number"].clone()),
                    ("flight_date", inputs["flight_date"].clone()),
                    ("cabin_class", inputs["cabin_class"].clone()),
                    ("price_usd", inputs["price_usd"].clone()),
                ]))
            }
            Some("transfer_funds") => {
                let get = |k: &str| collected.get(k).map(String::as_str).unwrap_or("");
                let ok = is_digits(get("from account"), 6, 20)
                    && is_digits(get("to account"), 6, 20)
                    && get("from account") != get("to account")
                    && is_amount(get("amount"));
                // Never echo what the user typed (§7, §8).
                Ok(if ok {
                    outputs(&[
                        ("status", Value::from("DONE")),
                        ("message", Value::from("The transfer was made.")),
                    ])
                } else {
                    outputs(&[
                        ("status", Value::from("FAILED")),
                        ("message", Value::from("The accounts or amount entered were not valid; nothing was transferred.")),
                    ])
                })
            }
            _ => Err("unknown tool in stored action".into()),
        }
    }
}

impl Operation for DemoTools {
    /// The execution log is in the RS's own store (the server builds the
    /// tools on `RsStore::executions`).
    fn effect(&self) -> Effect {
        Effect::InStore
    }

    /// Unflushed: the RS makes the result durable with the decision's final
    /// state ([`Effect::InStore`]).
    fn execute(
        &self,
        key: &str,
        action: &Value,
        collected: &IndexMap<String, String>,
    ) -> Result<Value, String> {
        self.run(key, action, collected, Durability::Deferred)
    }
}
