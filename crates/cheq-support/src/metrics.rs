//! What the servers count, exposed at `GET /metrics` in the Prometheus text
//! format. Counters are per instance (a scraper sums them); the
//! delivery gauges are read from the shared store by the delivery worker
//! every few seconds, so every instance reports the same outbox.
//!
//! The CS: `cheq_decisions_total{outcome}`, `cheq_deliveries_pending`,
//! `cheq_delivery_oldest_pending_age_seconds`, `cheq_deliveries_total{outcome}`,
//! `cheq_rs_fetch_seconds` (histogram) and `cheq_cheq_refusals_total{rule}`
//! (a CHEQ refused by rule N of PROTOCOL.md §5). The RS:
//! `cheq_operations_executed_total`, `cheq_rs_decisions_total{outcome}` and
//! `cheq_rs_decision_refusals_total{reason}`.

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

/// The content type of [`CsMetrics::render`] and [`RsMetrics::render`].
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

fn render(registry: &Registry) -> String {
    let mut out = Vec::new();
    // Encoding our own well-formed metrics into memory cannot fail; an
    // empty answer is the worst case.
    let _ = TextEncoder::new().encode(&registry.gather(), &mut out);
    String::from_utf8(out).unwrap_or_default()
}

/// Registers `c` in `r`. Names are constants of this module, so a clash is
/// a bug caught by the tests; it never stops a server.
fn register<C: prometheus::core::Collector + Clone + 'static>(r: &Registry, c: C) -> C {
    if let Err(e) = r.register(Box::new(c.clone())) {
        log::error!("metrics: {e}");
    }
    c
}

// `new` fails only on an invalid name or label, and ours are constants
// checked by the test below.
fn counter_vec(r: &Registry, name: &str, help: &str, label: &str) -> IntCounterVec {
    #[allow(clippy::expect_used)]
    let c = IntCounterVec::new(Opts::new(name, help), &[label]).expect("a valid metric name");
    register(r, c)
}

fn int_gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    #[allow(clippy::expect_used)]
    let g = IntGauge::new(name, help).expect("a valid metric name");
    register(r, g)
}

fn int_counter(r: &Registry, name: &str, help: &str) -> IntCounter {
    #[allow(clippy::expect_used)]
    let c = IntCounter::new(name, help).expect("a valid metric name");
    register(r, c)
}

/// The confirmation server's metrics.
#[derive(Debug, Clone)]
pub struct CsMetrics {
    registry: Registry,
    /// Countersigned decisions, by `outcome` (`accept`, `reject`).
    pub decisions: IntCounterVec,
    /// Delivery attempts that ended, by `outcome` (`delivered`, `refused`,
    /// `expired`, `retry`).
    pub deliveries: IntCounterVec,
    /// Decisions not yet delivered (set at scrape time from the store).
    pub deliveries_pending: IntGauge,
    /// Age of the oldest undelivered decision (set at scrape time).
    pub oldest_pending_age: IntGauge,
    /// How long fetching a CHEQ from a resource server took (§3).
    pub fetch_seconds: Histogram,
    /// CHEQs refused, by `rule` of §5 (`1` … `9`).
    pub refusals: IntCounterVec,
    /// `GET /.well-known/jwks.json` answered (§9).
    pub jwks_served: IntCounter,
}

impl Default for CsMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl CsMetrics {
    pub fn new() -> Self {
        let r = Registry::new();
        #[allow(clippy::expect_used)]
        let fetch = Histogram::with_opts(
            HistogramOpts::new(
                "cheq_rs_fetch_seconds",
                "Time to fetch a CHEQ from a resource server (GET of the resource URI).",
            )
            .buckets(vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
        )
        .expect("valid histogram options");
        CsMetrics {
            decisions: counter_vec(
                &r,
                "cheq_decisions_total",
                "Decisions countersigned, by outcome.",
                "outcome",
            ),
            deliveries: counter_vec(
                &r,
                "cheq_deliveries_total",
                "Delivery attempts to resource servers, by outcome.",
                "outcome",
            ),
            deliveries_pending: int_gauge(
                &r,
                "cheq_deliveries_pending",
                "Decisions the resource server has not yet taken.",
            ),
            oldest_pending_age: int_gauge(
                &r,
                "cheq_delivery_oldest_pending_age_seconds",
                "Age of the oldest decision not yet delivered (0 when none).",
            ),
            fetch_seconds: register(&r, fetch),
            jwks_served: int_counter(
                &r,
                "cheq_jwks_requests_total",
                "Requests for /.well-known/jwks.json answered.",
            ),
            refusals: counter_vec(
                &r,
                "cheq_cheq_refusals_total",
                "CHEQs refused, by the rule of PROTOCOL.md section 5 that failed.",
                "rule",
            ),
            registry: r,
        }
        .with_known_labels()
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        render(&self.registry)
    }

    /// Makes the known label values show (at 0) before anything happened.
    fn with_known_labels(self) -> Self {
        for outcome in ["accept", "reject"] {
            self.decisions.with_label_values(&[outcome]);
        }
        for outcome in ["delivered", "refused", "expired", "retry"] {
            self.deliveries.with_label_values(&[outcome]);
        }
        self
    }
}

/// The reference resource server's metrics.
#[derive(Debug, Clone)]
pub struct RsMetrics {
    registry: Registry,
    /// Operations that ran (an execution recorded fresh: its effect).
    pub executed: IntCounter,
    /// Decisions taken (first recording of a nonce), by `outcome`.
    pub decisions: IntCounterVec,
    /// Decision posts refused, by `reason` (the JSON error code).
    pub refusals: IntCounterVec,
    /// `GET /.well-known/jwks.json` answered (§9).
    pub jwks_served: IntCounter,
}

impl Default for RsMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl RsMetrics {
    pub fn new() -> Self {
        let r = Registry::new();
        RsMetrics {
            executed: int_counter(
                &r,
                "cheq_operations_executed_total",
                "Operations executed (each at most once per confirmation).",
            ),
            decisions: counter_vec(
                &r,
                "cheq_rs_decisions_total",
                "Decisions recorded, by outcome.",
                "outcome",
            ),
            refusals: counter_vec(
                &r,
                "cheq_rs_decision_refusals_total",
                "Decision documents refused, by error code.",
                "reason",
            ),
            jwks_served: int_counter(
                &r,
                "cheq_jwks_requests_total",
                "Requests for /.well-known/jwks.json answered.",
            ),
            registry: r,
        }
        .with_known_labels()
    }

    /// Makes the known label values show (at 0) before anything happened.
    fn with_known_labels(self) -> Self {
        for outcome in ["accept", "reject"] {
            self.decisions.with_label_values(&[outcome]);
        }
        self
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        render(&self.registry)
    }
}

/// Who may read `GET /metrics` (the `metrics` setting of either server).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricsAccess {
    /// Anyone who can reach the server (behind a network that keeps
    /// strangers out, or on loopback).
    Open,
    /// Only a request with `Authorization: Bearer <token>`, the token being
    /// the contents of `metrics.secret` in the data directory (generated,
    /// 0600, at the first start). The default: the metrics share the
    /// server's public listener.
    #[default]
    Token,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_exposed_with_its_labels() {
        let m = CsMetrics::new();
        m.decisions.with_label_values(&["accept"]).inc();
        m.refusals.with_label_values(&["3"]).inc_by(2);
        m.deliveries.with_label_values(&["delivered"]).inc();
        m.fetch_seconds.observe(0.003);
        m.deliveries_pending.set(4);
        let text = m.render();
        for line in [
            "cheq_decisions_total{outcome=\"accept\"} 1",
            "cheq_cheq_refusals_total{rule=\"3\"} 2",
            "cheq_deliveries_total{outcome=\"delivered\"} 1",
            "cheq_deliveries_pending 4",
            "cheq_delivery_oldest_pending_age_seconds 0",
            "cheq_rs_fetch_seconds_bucket{le=\"0.005\"} 1",
            "cheq_rs_fetch_seconds_count 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        let r = RsMetrics::new();
        r.executed.inc();
        assert!(r
            .render()
            .lines()
            .any(|l| l == "cheq_operations_executed_total 1"));
    }
}
