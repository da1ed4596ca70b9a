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

/// Check `url` is http(s) and its host is in `allowed` (`host` or `host:port` entries).
pub fn check_allowed(url: &str, allowed: &[String]) -> Result<url::Url, ClientError> {
    let parsed = url::Url::parse(url).map_err(|_| ClientError::InvalidUrl(url.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(ClientError::InvalidUrl(url.to_string()));
    }
    let host = parsed
        .host_str()
        .ok_or_else(|| ClientError::InvalidUrl(url.to_string()))?
        .to_string();
    let with_port = format!("{host}:{}", parsed.port_or_known_default().unwrap_or(80));
    if allowed.iter().any(|entry| entry == &host || entry == &with_port) {
        Ok(parsed)
    } else {
        Err(ClientError::HostNotAllowed(with_port))
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
