//! Outgoing HTTP for plugins: `wasi:http/outgoing-handler`, so ordinary HTTP
//! code (Rust's `wstd`, and whatever else targets WASI 0.2's HTTP) works in a
//! plugin — through the host, under the host's policy.
//!
//! A request leaves the node only when both sides allow its destination: the
//! plugin declares it in its capabilities (`allowed_hosts`: scheme, host and
//! port, like Spin's `allowed_outbound_hosts`; nothing by default), and the
//! operator lists the host in `outbound.allowed_hosts`. Anything else is
//! refused at once with an error naming the destination, never sent. An
//! allowed request goes through the node's one pooled client (the shared
//! trust roots and `tls.ca_file`, certificates always verified), bounded by
//! `outbound.timeout_ms` and, for the request and the answer bodies each,
//! `outbound.max_response_bytes`. Redirects come back to the plugin as they
//! are: following one is a new request, checked again. A listed *name* that
//! resolves inside the node's network (loopback, private, link-local…) is
//! refused when connecting, like every outbound call (`peers::http_client`):
//! only an IP literal listed, or `outbound.allowed_private`, reaches inside.

use std::sync::{Arc, Weak};
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use wasmtime_wasi_http::{
    Error as HttpError, RequestOptions, WasiBody, WasiHttpCtxView, WasiHttpHooks, WasiHttpView,
};

use super::instance::PluginState;
use super::{Runtime, RuntimeInner};
use crate::peers::http_client::{self, ClientError};

/// The `wasi:http` hooks of one store: who is asking, to find what they may reach.
pub(crate) struct PluginHttp {
    plugin: Arc<str>,
    runtime: Weak<RuntimeInner>,
}

impl PluginHttp {
    pub(crate) fn new(plugin: Arc<str>, runtime: Weak<RuntimeInner>) -> PluginHttp {
        PluginHttp { plugin, runtime }
    }
}

impl WasiHttpView for PluginState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http_ctx,
            table: &mut self.table,
            hooks: &mut self.http_hooks,
        }
    }
}

/// What a destination is, as the allow-lists compare it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Destination {
    pub scheme: String,
    pub host: String,
    pub port: u16,
}

impl Destination {
    /// `scheme://host[:port]` of a URL (the port defaulted by the scheme).
    pub fn of_url(url: &url::Url) -> Option<Destination> {
        let scheme = url.scheme().to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return None;
        }
        Some(Destination {
            host: url.host_str()?.to_ascii_lowercase(),
            port: url.port_or_known_default()?,
            scheme,
        })
    }
}

impl std::fmt::Display for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
    }
}

/// What one allowed request may use, read from the node when it is made.
struct Allowed {
    timeout: Duration,
    max_bytes: usize,
    metrics: crate::metrics::Metrics,
}

impl PluginHttp {
    /// The destination is declared by the plugin and listed by the operator, or why not.
    fn check(&self, url: &url::Url) -> Result<Allowed, HttpError> {
        // Logged as well as answered: some clients keep only that the request
        // failed (JavaScript's `fetch()` rejects with a bare "NetworkError").
        let denied = |why: String| {
            let why = format!("HTTP request denied: {why}");
            tracing::warn!(plugin = &*self.plugin, "{why}");
            HttpError::InternalError(Some(why))
        };
        let destination =
            Destination::of_url(url).ok_or_else(|| denied(format!("{url} is not an http(s) URL")))?;
        let runtime =
            Runtime::from_weak(&self.runtime).ok_or_else(|| denied("the node is shutting down".into()))?;
        let declared = runtime
            .loaded(&self.plugin)
            .is_some_and(|plugin| plugin.capabilities.allowed_hosts.contains(&destination));
        let metrics = runtime.metrics().clone();
        if !declared {
            metrics.observe_plugin_http(&self.plugin, "denied");
            return Err(denied(format!(
                "{destination} is not in the allowed_hosts of plugin {}'s capabilities",
                self.plugin
            )));
        }
        let outbound = &runtime.inner.host.node_config.outbound;
        if let Err(error) = http_client::check_allowed(url.as_str(), &outbound.allowed_hosts) {
            metrics.observe_plugin_http(&self.plugin, "denied");
            return Err(denied(format!("{destination}: {error}")));
        }
        Ok(Allowed {
            timeout: Duration::from_millis(outbound.timeout_ms),
            max_bytes: outbound.max_response_bytes,
            metrics,
        })
    }
}

type Answer = Result<
    (
        http::Response<WasiBody>,
        Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ),
    HttpError,
>;

impl WasiHttpHooks for PluginHttp {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<dyn Future<Output = Answer> + Send> {
        // The answer is read whole below, so no error can come after it is handed back.
        drop(fut);
        let checked = url::Url::parse(&request.uri().to_string())
            .map_err(|_| HttpError::HttpRequestUriInvalid)
            .and_then(|url| Ok((self.check(&url)?, url)));
        let plugin = self.plugin.clone();
        Box::new(async move {
            let (allowed, url) = checked?;
            let mut timeout = allowed.timeout;
            if let Some(first_byte) = options.and_then(|o| o.first_byte_timeout) {
                timeout = timeout.min(first_byte);
            }
            let outcome = send(request, &url, timeout, allowed.max_bytes).await;
            let label = match &outcome {
                Ok(_) => "ok",
                Err(Failed::Denied(why)) => {
                    tracing::warn!(plugin = &*plugin, "{why}");
                    "denied"
                }
                Err(Failed::Other(HttpError::ConnectionTimeout | HttpError::HttpResponseTimeout)) => {
                    "timeout"
                }
                Err(Failed::Other(_)) => "failed",
            };
            allowed.metrics.observe_plugin_http(&plugin, label);
            let response = outcome.map_err(|failed| match failed {
                Failed::Denied(why) => HttpError::InternalError(Some(why)),
                Failed::Other(error) => error,
            })?;
            Ok((
                response,
                Box::new(async { Ok(()) }) as Box<dyn Future<Output = Result<(), HttpError>> + Send>,
            ))
        })
    }
}

/// Why an allowed request got no answer.
enum Failed {
    /// Refused by the node's policy when connecting (logged, with the reason).
    Denied(String),
    Other(HttpError),
}

impl From<HttpError> for Failed {
    fn from(error: HttpError) -> Failed {
        Failed::Other(error)
    }
}

/// Send an allowed request on the node's client; the answer read whole, bounded.
async fn send(
    request: http::Request<WasiBody>,
    url: &url::Url,
    timeout: Duration,
    max_bytes: usize,
) -> Result<http::Response<WasiBody>, Failed> {
    let (parts, body) = request.into_parts();
    let body = Limited::new(body, max_bytes)
        .collect()
        .await
        .map_err(|_| HttpError::HttpRequestBodySize(Some(max_bytes as u64)))?
        .to_bytes();
    let headers: Vec<(&str, &str)> = parts
        .headers
        .iter()
        .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
        .collect();
    let answer = http_client::request(
        parts.method.as_str(),
        url.as_str(),
        &headers,
        body.to_vec(),
        timeout,
        max_bytes,
    )
    .await
    .map_err(|error| match error {
        ClientError::InternalAddress(refused) => Failed::Denied(format!("HTTP request denied: {refused}")),
        ClientError::Timeout { .. } => HttpError::HttpResponseTimeout.into(),
        ClientError::TooLarge { .. } => HttpError::HttpResponseBodySize(Some(max_bytes as u64)).into(),
        ClientError::Tls { .. } => HttpError::TlsCertificateError.into(),
        other => HttpError::InternalError(Some(other.to_string())).into(),
    })?;
    let mut response = http::Response::builder().status(answer.status);
    if let Some(headers) = response.headers_mut() {
        *headers = answer.headers;
    }
    let body: WasiBody = Full::new(answer.body)
        .map_err(|never| match never {})
        .boxed_unsync();
    response
        .body(body)
        .map_err(|e| HttpError::InternalError(Some(format!("the answer cannot be handed on: {e}"))).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_carry_their_default_ports() {
        let of = |text: &str| Destination::of_url(&url::Url::parse(text).unwrap());
        assert_eq!(
            of("https://API.example.org/x").unwrap().to_string(),
            "https://api.example.org:443"
        );
        assert_eq!(
            of("http://127.0.0.1:9000/").unwrap().to_string(),
            "http://127.0.0.1:9000"
        );
        assert!(of("ftp://example.org/").is_none());
    }
}
