//! A small HTTP/1.1 client for the node's outbound calls: every call has a
//! timeout and a response-size cap, and only allowed hosts are reachable.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("invalid URL {0:?}")]
    InvalidUrl(String),
    #[error("host {0} is not in outbound.allowed_hosts")]
    HostNotAllowed(String),
    #[error("request to {url} failed: {message}")]
    Request { url: String, message: String },
    #[error("{url} did not answer within {timeout_ms} ms")]
    Timeout { url: String, timeout_ms: u64 },
    #[error("the response from {url} is over {limit} bytes")]
    TooLarge { url: String, limit: usize },
}

pub struct HttpResponse {
    pub status: u16,
    pub headers: axum::http::HeaderMap,
    pub body: Bytes,
}

/// Check `url` is http(s) and its destination is in `allowed`.
///
/// An entry `host:port` allows that port only; a bare `host` allows the
/// URL scheme's default port only (80 for http, 443 for https), never every
/// port: an allowed web host must not open its admin or database ports too.
/// Hosts compare case-insensitively; IPv6 entries are bracketed (`[::1]:8080`).
pub fn check_allowed(url: &str, allowed: &[String]) -> Result<url::Url, ClientError> {
    let parsed = url::Url::parse(url).map_err(|_| ClientError::InvalidUrl(url.to_string()))?;
    let default_port = match parsed.scheme() {
        "http" => 80,
        "https" => 443,
        _ => return Err(ClientError::InvalidUrl(url.to_string())),
    };
    let host = parsed
        .host_str()
        .ok_or_else(|| ClientError::InvalidUrl(url.to_string()))?
        .to_ascii_lowercase();
    let port = parsed.port().unwrap_or(default_port);
    let permitted = allowed.iter().any(|entry| {
        let (entry_host, entry_port) = split_entry(entry);
        entry_host.eq_ignore_ascii_case(&host) && entry_port.unwrap_or(default_port) == port
    });
    if permitted {
        Ok(parsed)
    } else {
        Err(ClientError::HostNotAllowed(format!("{host}:{port}")))
    }
}

/// `host[:port]` of an allow-list entry; an unparsable port never matches.
fn split_entry(entry: &str) -> (&str, Option<u16>) {
    let entry = entry.trim();
    // `[v6]:port`, or a bare IPv6 address, whose colons are not a port.
    let port_sep = if entry.starts_with('[') {
        entry.rfind("]:").map(|at| at + 1)
    } else if entry.matches(':').count() == 1 {
        entry.find(':')
    } else {
        None
    };
    match port_sep {
        Some(at) => (&entry[..at], Some(entry[at + 1..].parse().unwrap_or(0))),
        None => (entry, None),
    }
}

/// POST `body` to `url` with the given headers.
pub async fn post(
    url: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
    timeout: Duration,
    max_response_bytes: usize,
) -> Result<HttpResponse, ClientError> {
    request("POST", url, headers, body, timeout, max_response_bytes).await
}

pub async fn request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
    timeout: Duration,
    max_response_bytes: usize,
) -> Result<HttpResponse, ClientError> {
    if url.starts_with("https://") {
        return Err(ClientError::Request {
            url: url.into(),
            message: "https is not supported by this build's client".into(),
        });
    }
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut builder = axum::http::Request::builder().method(method).uri(url);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let request = builder
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| ClientError::Request {
            url: url.into(),
            message: e.to_string(),
        })?;
    let exchange = async {
        let response = client.request(request).await.map_err(|e| ClientError::Request {
            url: url.into(),
            message: e.to_string(),
        })?;
        let (parts, body) = response.into_parts();
        let body = Limited::new(body, max_response_bytes)
            .collect()
            .await
            .map_err(|_| ClientError::TooLarge {
                url: url.into(),
                limit: max_response_bytes,
            })?
            .to_bytes();
        Ok(HttpResponse {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
        })
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| ClientError::Timeout {
            url: url.into(),
            timeout_ms: timeout.as_millis() as u64,
        })?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allows(url: &str, entries: &[&str]) -> bool {
        let entries: Vec<String> = entries.iter().map(|e| e.to_string()).collect();
        check_allowed(url, &entries).is_ok()
    }

    #[test]
    fn a_bare_host_allows_only_the_default_port() {
        assert!(allows("http://127.0.0.1/x", &["127.0.0.1"]));
        assert!(allows("http://127.0.0.1:80/x", &["127.0.0.1"]));
        assert!(!allows("http://127.0.0.1:9999/x", &["127.0.0.1"]));
        assert!(allows("https://Example.COM/x", &["example.com"]));
        assert!(!allows("https://example.com:8443/x", &["example.com"]));
        // The default port follows the scheme: "host" is 443 for https, not 80.
        assert!(!allows("http://example.com:443/x", &["example.com"]));
    }

    #[test]
    fn host_and_port_allows_that_port_only() {
        assert!(allows("http://127.0.0.1:9999/x", &["127.0.0.1:9999"]));
        assert!(!allows("http://127.0.0.1:9998/x", &["127.0.0.1:9999"]));
        assert!(!allows("http://127.0.0.1/x", &["127.0.0.1:9999"]));
        assert!(allows("http://[::1]:8080/x", &["[::1]:8080"]));
        assert!(allows("http://[::1]/x", &["[::1]"]));
        assert!(!allows("http://[::1]:8080/x", &["[::1]"]));
        assert!(!allows("http://127.0.0.1:9999/x", &["127.0.0.1:nope"]));
        assert!(!allows("http://127.0.0.2/x", &["127.0.0.1"]));
    }
}
