//! Prometheus metrics served at `GET /metrics`: plugin calls by transport,
//! plugin and outcome, their latency, reloads, traps and dropped events, and
//! the listeners' open and refused connections, HTTP requests by route
//! template, method and status, and how long writes waited to be durable.
//!
//! The console's charts read [`recent`], which the same calls feed.
//!
//! Every label value comes from a bounded set: routes are the templates the
//! node mounts (or `unmatched`), never a raw path a client chose; methods are
//! the standard ones (or `other`).
//!
//! The counters every request and every plugin call touch are kept as
//! [`Resolved`] handles: a family's own lookup builds an owned label set (a
//! `String` per label) and hashes it on every call, which issue 42 measured on
//! the Agora hot path; a resolved handle is found by its route or plugin name
//! alone and allocates nothing after the first time.

pub mod recent;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use self::recent::Recent;
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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub route: String,
    pub method: &'static str,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpRouteLabels {
    pub route: String,
    pub method: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginOutcomeLabels {
    pub plugin: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabels {
    pub plugin: String,
    /// `input` (the prompt) or `output` (the answer).
    pub direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabels {
    pub plugin: String,
}

/// The route label of a request no route matched.
pub const UNMATCHED_ROUTE: &str = "unmatched";

/// A request method as a label: the standard ones as themselves, anything else `other`.
pub fn method_label(method: &str) -> &'static str {
    const STANDARD: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
    ];
    STANDARD
        .into_iter()
        .find(|standard| *standard == method)
        .unwrap_or("other")
}

/// The node's metric families behind one `Arc`: a handle is cloned into every
/// request's middleware, and one reference count is cheaper than twenty.
#[derive(Clone)]
pub struct Metrics(Arc<MetricFamilies>);

impl std::ops::Deref for Metrics {
    type Target = MetricFamilies;
    fn deref(&self) -> &MetricFamilies {
        &self.0
    }
}

pub struct MetricFamilies {
    registry: Registry,
    pub calls: Family<CallLabels, Counter>,
    pub latency: Family<LatencyLabels, Histogram>,
    pub reloads: Family<OutcomeLabels, Counter>,
    pub traps: Family<CallLabels, Counter>,
    pub events_dropped: Family<StreamLabels, Counter>,
    pub connections_open: Gauge,
    pub connections_refused: Family<ReasonLabels, Counter>,
    pub bodies_refused: Family<ReasonLabels, Counter>,
    pub http_requests: Family<HttpLabels, Counter>,
    pub http_duration: Family<HttpRouteLabels, Histogram>,
    /// HAI frames a fleet's nodes did not pass between them (outbox full,
    /// publish failed, read too slowly); zero on a single node.
    pub fleet_frames_lost: Family<ReasonLabels, Counter>,
    /// Plugins' language-model calls by outcome, their tokens and their time.
    pub llm_calls: Family<PluginOutcomeLabels, Counter>,
    pub llm_tokens: Family<TokenLabels, Counter>,
    pub llm_duration: Family<PluginLabels, Histogram>,
    /// Plugins' outgoing HTTP requests (`wasi:http`) by outcome (`ok`, `denied`, `timeout`, `failed`).
    pub plugin_http: Family<PluginOutcomeLabels, Counter>,
    /// Plugins' scheduled runs by outcome (`ok`, `failed`, `skipped` while the previous ran).
    pub schedule_runs: Family<PluginOutcomeLabels, Counter>,
    /// A2A push deliveries by outcome (`delivered`, `retried`, `rejected`,
    /// `expired`, `refused`, `dropped`).
    pub a2a_push_deliveries: Family<OutcomeLabels, Counter>,
    /// A2A push deliveries owed, as this node's last look at the outbox found them.
    pub a2a_push_pending: Gauge,
    /// How long each durable commit waited (the embedded store's group
    /// commit; a shared store's writes are durable when they return).
    pub store_commit_wait: Histogram,
    /// The last fifteen minutes, for the console ([`recent`]).
    pub recent: Recent,
    /// `http_requests` and `http_duration` by route template.
    http_handles: Resolved<(&'static str, u16), (Counter, Histogram)>,
    /// `calls` and `latency` by plugin.
    call_handles: Resolved<(&'static str, &'static str), (Counter, Histogram)>,
}

/// Metric handles resolved once per label set and kept under their first label
/// (a route, a plugin), so a hit is one read lock, one hash of that label and a
/// short scan, without allocating. Bounded as the families are: by the label sets
/// the node makes, never by what a client sends.
struct Resolved<K, M> {
    by_name: RwLock<HandlesByName<K, M>>,
}

/// A name's handles, each under the rest of its label set.
type HandlesByName<K, M> = HashMap<Box<str>, Vec<(K, M)>>;

impl<K, M> Default for Resolved<K, M> {
    fn default() -> Self {
        Resolved {
            by_name: RwLock::new(HashMap::new()),
        }
    }
}

impl<K: Copy + PartialEq, M> Resolved<K, M> {
    /// Run `use_handle` on the handle of (`name`, `rest`), resolving it first if new.
    fn with(&self, name: &str, rest: K, resolve: impl FnOnce() -> M, use_handle: impl FnOnce(&M)) {
        if let Some(handle) = self
            .by_name
            .read()
            .get(name)
            .and_then(|handles| handles.iter().find(|(key, _)| *key == rest))
        {
            use_handle(&handle.1);
            return;
        }
        let mut by_name = self.by_name.write();
        let handles = by_name.entry(name.into()).or_default();
        if let Some(handle) = handles.iter().find(|(key, _)| *key == rest) {
            use_handle(&handle.1);
            return;
        }
        let handle = resolve();
        use_handle(&handle);
        handles.push((rest, handle));
    }
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
        let http_requests = Family::<HttpLabels, Counter>::default();
        let http_duration = Family::<HttpRouteLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.000_1, 2.0, 18))
        });
        registry.register(
            "http_requests",
            "HTTP requests by route template, method and status, refusals by the node's own layers included",
            http_requests.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "Time from a request's arrival to its response head, by route template and method",
            http_duration.clone(),
        );
        let fleet_frames_lost = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "fleet_frames_lost",
            "HAI frames not passed between the nodes of a fleet, by reason",
            fleet_frames_lost.clone(),
        );
        let llm_calls = Family::<PluginOutcomeLabels, Counter>::default();
        let llm_tokens = Family::<TokenLabels, Counter>::default();
        let llm_duration = Family::<PluginLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.01, 2.0, 14))
        });
        registry.register(
            "llm_calls",
            "Language-model calls of plugins by outcome (ok, limited, failed, timed_out, …)",
            llm_calls.clone(),
        );
        registry.register(
            "llm_tokens",
            "Language-model tokens of plugins, input (prompt) and output (answer)",
            llm_tokens.clone(),
        );
        registry.register(
            "llm_call_seconds",
            "Time from a plugin's model call to the end of its answer",
            llm_duration.clone(),
        );
        let plugin_http = Family::<PluginOutcomeLabels, Counter>::default();
        registry.register(
            "plugin_http_requests",
            "Outgoing HTTP requests of plugins by outcome; denied: not in the plugin's or the node's allowed hosts",
            plugin_http.clone(),
        );
        let schedule_runs = Family::<PluginOutcomeLabels, Counter>::default();
        registry.register(
            "schedule_runs",
            "Scheduled runs of plugins (tick) by outcome; skipped: the previous run was still going",
            schedule_runs.clone(),
        );
        let a2a_push_deliveries = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "a2a_push_deliveries",
            "A2A push notification delivery attempts by outcome (delivered, retried, rejected, expired, refused, dropped)",
            a2a_push_deliveries.clone(),
        );
        let a2a_push_pending = Gauge::default();
        registry.register(
            "a2a_push_pending",
            "A2A push notification deliveries owed, at this node's last look",
            a2a_push_pending.clone(),
        );
        let store_commit_wait = Histogram::new(exponential_buckets(0.000_05, 2.0, 18));
        registry.register(
            "store_commit_wait_seconds",
            "Time a write waited to be durable: the embedded store's group commit, one round or two",
            store_commit_wait.clone(),
        );
        Metrics(Arc::new(MetricFamilies {
            registry,
            store_commit_wait,
            a2a_push_deliveries,
            a2a_push_pending,
            llm_calls,
            llm_tokens,
            llm_duration,
            schedule_runs,
            plugin_http,
            fleet_frames_lost,
            http_requests,
            http_duration,
            connections_open,
            connections_refused,
            bodies_refused,
            calls,
            latency,
            reloads,
            traps,
            events_dropped,
            recent: Recent::default(),
            http_handles: Resolved::default(),
            call_handles: Resolved::default(),
        }))
    }

    pub fn observe_call(
        &self,
        transport: &'static str,
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
    pub fn observe_outcome(
        &self,
        transport: &'static str,
        plugin: &str,
        outcome: &'static str,
        elapsed: Duration,
    ) {
        if matches!(outcome, "timeout" | "memory" | "trap" | "output_too_large") {
            self.traps
                .get_or_create(&CallLabels {
                    transport: transport.into(),
                    plugin: plugin.into(),
                    outcome: outcome.into(),
                })
                .inc();
        }
        let resolve = || {
            let calls = self
                .calls
                .get_or_create(&CallLabels {
                    transport: transport.into(),
                    plugin: plugin.into(),
                    outcome: outcome.into(),
                })
                .clone();
            let latency = self
                .latency
                .get_or_create(&LatencyLabels {
                    transport: transport.into(),
                    plugin: plugin.into(),
                })
                .clone();
            (calls, latency)
        };
        self.call_handles
            .with(plugin, (transport, outcome), resolve, |(calls, latency)| {
                calls.inc();
                latency.observe(elapsed.as_secs_f64());
            });
        self.recent
            .observe_call(plugin, outcome, elapsed, crate::vocab::now_ms());
    }

    /// Count one language-model call of `plugin` that ended with `outcome`.
    pub fn observe_llm_call(
        &self,
        plugin: &str,
        outcome: &str,
        elapsed: Duration,
        input_tokens: u32,
        output_tokens: u32,
    ) {
        self.llm_calls
            .get_or_create(&PluginOutcomeLabels {
                plugin: plugin.into(),
                outcome: outcome.into(),
            })
            .inc();
        for (direction, tokens) in [("input", input_tokens), ("output", output_tokens)] {
            self.llm_tokens
                .get_or_create(&TokenLabels {
                    plugin: plugin.into(),
                    direction,
                })
                .inc_by(u64::from(tokens));
        }
        self.llm_duration
            .get_or_create(&PluginLabels {
                plugin: plugin.into(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// Count one outgoing HTTP request of `plugin` by its outcome.
    pub fn observe_plugin_http(&self, plugin: &str, outcome: &str) {
        self.plugin_http
            .get_or_create(&PluginOutcomeLabels {
                plugin: plugin.into(),
                outcome: outcome.into(),
            })
            .inc();
    }

    /// Count one scheduled run of `plugin` by its outcome.
    pub fn observe_schedule_run(&self, plugin: &str, outcome: &str) {
        self.schedule_runs
            .get_or_create(&PluginOutcomeLabels {
                plugin: plugin.into(),
                outcome: outcome.into(),
            })
            .inc();
    }

    /// Count one HTTP request. `route` is the matched template or [`UNMATCHED_ROUTE`].
    pub fn observe_http(&self, route: &str, method: &str, status: u16, elapsed: Duration) {
        let method = method_label(method);
        let resolve = || {
            let requests = self
                .http_requests
                .get_or_create(&HttpLabels {
                    route: route.into(),
                    method,
                    status,
                })
                .clone();
            let duration = self
                .http_duration
                .get_or_create(&HttpRouteLabels {
                    route: route.into(),
                    method,
                })
                .clone();
            (requests, duration)
        };
        self.http_handles
            .with(route, (method, status), resolve, |(requests, duration)| {
                requests.inc();
                duration.observe(elapsed.as_secs_f64());
            });
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut text = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_labels_are_bounded() {
        assert_eq!(method_label("GET"), "GET");
        assert_eq!(method_label("get"), "other");
        assert_eq!(method_label("BREW"), "other");
        let metrics = Metrics::new();
        metrics.observe_http("/agora", "BREW", 405, Duration::from_millis(3));
        let text = metrics.render();
        assert!(
            text.contains(r#"agora_http_requests_total{route="/agora",method="other",status="405"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"agora_http_request_duration_seconds_count{route="/agora",method="other"} 1"#),
            "{text}"
        );
    }

    #[test]
    fn resolved_handles_count_into_the_same_series_as_the_families() {
        let metrics = Metrics::new();
        for _ in 0..3 {
            metrics.observe_http("/agora", "POST", 200, Duration::from_millis(1));
        }
        metrics.observe_http("/agora", "POST", 400, Duration::from_millis(1));
        metrics.observe_http("/a2a", "POST", 200, Duration::from_millis(1));
        metrics.observe_outcome("agora", "unit-converter", "ok", Duration::from_millis(1));
        metrics.observe_outcome("agora", "unit-converter", "ok", Duration::from_millis(1));
        metrics.observe_outcome("mcp", "unit-converter", "timeout", Duration::from_millis(1));
        let text = metrics.render();
        for line in [
            r#"agora_http_requests_total{route="/agora",method="POST",status="200"} 3"#,
            r#"agora_http_requests_total{route="/agora",method="POST",status="400"} 1"#,
            r#"agora_http_requests_total{route="/a2a",method="POST",status="200"} 1"#,
            r#"agora_http_request_duration_seconds_count{route="/agora",method="POST"} 4"#,
            r#"agora_plugin_calls_total{transport="agora",plugin="unit-converter",outcome="ok"} 2"#,
            r#"agora_plugin_calls_total{transport="mcp",plugin="unit-converter",outcome="timeout"} 1"#,
            r#"agora_plugin_traps_total{transport="mcp",plugin="unit-converter",outcome="timeout"} 1"#,
            r#"agora_plugin_call_seconds_count{transport="agora",plugin="unit-converter"} 2"#,
            r#"agora_plugin_call_seconds_count{transport="mcp",plugin="unit-converter"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
