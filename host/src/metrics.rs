//! Prometheus metrics served at `GET /metrics`: plugin calls by transport,
//! plugin and outcome, their latency, reloads, traps and dropped events, and
//! the listeners' open and refused connections.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::vocab::InvokeError;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub transport: String,
    pub plugin: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LatencyLabels {
    pub transport: String,
    pub plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: String,
}

impl OutcomeLabels {
    pub fn new(outcome: &str) -> Self {
        OutcomeLabels {
            outcome: outcome.to_string(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StreamLabels {
    pub stream: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    pub calls: Family<CallLabels, Counter>,
    pub latency: Family<LatencyLabels, Histogram>,
    pub reloads: Family<OutcomeLabels, Counter>,
    pub traps: Family<CallLabels, Counter>,
    pub events_dropped: Family<StreamLabels, Counter>,
    pub connections_open: Gauge,
    pub connections_refused: Family<ReasonLabels, Counter>,
    pub bodies_refused: Family<ReasonLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("agora");
        let calls = Family::<CallLabels, Counter>::default();
        let latency = Family::<LatencyLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.000_05, 2.0, 18))
        });
        let reloads = Family::<OutcomeLabels, Counter>::default();
        let traps = Family::<CallLabels, Counter>::default();
        let events_dropped = Family::<StreamLabels, Counter>::default();
        registry.register(
            "plugin_calls",
            "Plugin calls by transport, plugin and outcome",
            calls.clone(),
        );
        registry.register("plugin_call_seconds", "Plugin call latency", latency.clone());
        registry.register("plugin_reloads", "Plugin loads by outcome", reloads.clone());
        registry.register(
            "plugin_traps",
            "Plugin calls that trapped, timed out or exceeded a limit",
            traps.clone(),
        );
        registry.register(
            "events_dropped",
            "Live events dropped because a stream was behind",
            events_dropped.clone(),
        );
        let connections_open = Gauge::default();
        let connections_refused = Family::<ReasonLabels, Counter>::default();
        let bodies_refused = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "connections_open",
            "Open client connections across the listeners, WebSockets included",
            connections_open.clone(),
        );
        registry.register(
            "connections_refused",
            "Connections closed on arrival because a connection cap was reached",
            connections_refused.clone(),
        );
        registry.register(
            "bodies_refused",
            "Request bodies refused by size before a handler read them",
            bodies_refused.clone(),
        );
        Metrics {
            registry: Arc::new(registry),
            connections_open,
            connections_refused,
            bodies_refused,
            calls,
            latency,
            reloads,
            traps,
            events_dropped,
        }
    }

    pub fn observe_call(
        &self,
        transport: &str,
        plugin: &str,
        result: &Result<String, InvokeError>,
        elapsed: Duration,
    ) {
        let outcome = match result {
            Ok(_) => "ok",
            Err(error) => error.outcome(),
        };
        self.observe_outcome(transport, plugin, outcome, elapsed);
    }

    /// Count one call by its outcome label (`ok`, or [`InvokeError::outcome`]).
    pub fn observe_outcome(&self, transport: &str, plugin: &str, outcome: &str, elapsed: Duration) {
        let labels = CallLabels {
            transport: transport.into(),
            plugin: plugin.into(),
            outcome: outcome.into(),
        };
        if matches!(outcome, "timeout" | "memory" | "trap" | "output_too_large") {
            self.traps.get_or_create(&labels).inc();
        }
        self.calls.get_or_create(&labels).inc();
        self.latency
            .get_or_create(&LatencyLabels {
                transport: transport.into(),
                plugin: plugin.into(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut text = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}
