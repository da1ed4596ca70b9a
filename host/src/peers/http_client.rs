//! The node's outbound HTTP calls, all through the one pooled client of
//! [`super::tls`] (rustls, the shared trust roots): every call has a timeout and
//! a response-size cap, and only allowed hosts are reachable.
//!
//! Redirects are never followed by the client itself. [`request`] and [`post`]
//! hand a 3xx back to the caller as the response; [`request_within`] follows a
//! few hops, each checked against the same allow-list as the first URL, so a
//! peer on the list cannot send the node to a host that is not.

use std::time::Duration;

use bytes::{Bytes, BytesMut};

use super::tls;

/// Hops [`request_within`] follows before giving up.
pub const MAX_REDIRECTS: usize = 5;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("invalid URL {0:?}")]
    InvalidUrl(String),
    #[error("host {0} is not in outbound.allowed_hosts")]
    HostNotAllowed(String),
    #[error("request to {url} failed: {message}")]
    Request { url: String, message: String },
    #[error("TLS with {url} failed: {reason}")]
    Tls { url: String, reason: String },
    #[error("{url} did not answer within {timeout_ms} ms")]
    Timeout { url: String, timeout_ms: u64 },
    #[error("the response from {url} is over {limit} bytes")]
    TooLarge { url: String, limit: usize },
    #[error("{from} redirects to {to}, whose host {host} is not allowed; not followed")]
    RedirectNotAllowed { from: String, to: String, host: String },
    #[error("{url} answered {status} without a usable Location header")]
    BadRedirect { url: String, status: u16 },
    #[error("{url}: more than {MAX_REDIRECTS} redirects; not followed further")]
    TooManyRedirects { url: String },
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

/// POST `body` to `url` with the given headers; a redirect is returned, not followed.
pub async fn post(
    url: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
    timeout: Duration,
    max_response_bytes: usize,
) -> Result<HttpResponse, ClientError> {
    request("POST", url, headers, body, timeout, max_response_bytes).await
}

/// One exchange with `url`; a redirect is returned to the caller, not followed.
pub async fn request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
    timeout: Duration,
    max_response_bytes: usize,
) -> Result<HttpResponse, ClientError> {
    let parsed = url::Url::parse(url).map_err(|_| ClientError::InvalidUrl(url.to_string()))?;
    let method = parse_method(method, url)?;
    let exchange = exchange(&method, &parsed, headers, Bytes::from(body), max_response_bytes);
    with_deadline(url, timeout, exchange).await
}

/// Like [`request`], after checking `url` against `allowed`, and following up
/// to [`MAX_REDIRECTS`] redirects, each to a host `allowed` names too. The
/// timeout covers every hop.
pub async fn request_within(
    allowed: &[String],
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
    timeout: Duration,
    max_response_bytes: usize,
) -> Result<HttpResponse, ClientError> {
    let mut current = check_allowed(url, allowed)?;
    let mut method = parse_method(method, url)?;
    let mut body = Bytes::from(body);
    let hops = async {
        for _ in 0..=MAX_REDIRECTS {
            let response = exchange(&method, &current, headers, body.clone(), max_response_bytes).await?;
            let location = response
                .headers
                .get(reqwest::header::LOCATION)
                .and_then(|value| value.to_str().ok());
            match next_hop(&current, response.status, location, allowed)? {
                None => return Ok(response),
                Some(next) => {
                    tracing::debug!(from = %current, to = %next, status = response.status, "following a redirect");
                    if rewrites_to_get(response.status, &method) {
                        method = reqwest::Method::GET;
                        body = Bytes::new();
                    }
                    current = next;
                }
            }
        }
        Err(ClientError::TooManyRedirects { url: url.to_string() })
    };
    with_deadline(url, timeout, hops).await
}

/// Where a response sends the caller next: `None` when it is not a redirect.
fn next_hop(
    current: &url::Url,
    status: u16,
    location: Option<&str>,
    allowed: &[String],
) -> Result<Option<url::Url>, ClientError> {
    if !matches!(status, 301 | 302 | 303 | 307 | 308) {
        return Ok(None);
    }
    let bad = || ClientError::BadRedirect {
        url: current.to_string(),
        status,
    };
    let next = current.join(location.ok_or_else(bad)?).map_err(|_| bad())?;
    match check_allowed(next.as_str(), allowed) {
        Ok(next) => Ok(Some(next)),
        Err(ClientError::HostNotAllowed(host)) => Err(ClientError::RedirectNotAllowed {
            from: current.to_string(),
            to: next.to_string(),
            host,
        }),
        Err(other) => Err(other),
    }
}

/// 303, and 301/302 after a POST, continue as a GET without a body (as browsers do);
/// 307 and 308 repeat the request as it was.
fn rewrites_to_get(status: u16, method: &reqwest::Method) -> bool {
    status == 303 || (matches!(status, 301 | 302) && *method == reqwest::Method::POST)
}

fn parse_method(method: &str, url: &str) -> Result<reqwest::Method, ClientError> {
    reqwest::Method::from_bytes(method.as_bytes()).map_err(|_| ClientError::Request {
        url: url.into(),
        message: format!("invalid method {method:?}"),
    })
}

async fn with_deadline<F>(url: &str, timeout: Duration, call: F) -> Result<HttpResponse, ClientError>
where
    F: std::future::Future<Output = Result<HttpResponse, ClientError>>,
{
    tokio::time::timeout(timeout, call)
        .await
        .map_err(|_| ClientError::Timeout {
            url: url.into(),
            timeout_ms: timeout.as_millis() as u64,
        })?
}

/// A response whose body the caller reads as it arrives (server-sent events),
/// chunk by chunk, with its own bounds; only the headers are waited for here.
pub struct StreamingResponse {
    pub status: u16,
    pub headers: axum::http::HeaderMap,
    url: url::Url,
    response: reqwest::Response,
}

impl StreamingResponse {
    /// The next piece of the body, `None` at its end.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, ClientError> {
        self.response.chunk().await.map_err(|e| send_error(&self.url, &e))
    }
}

/// Send a request and return once the response headers are in (within
/// `timeout`); a redirect is returned, not followed.
pub async fn open_stream(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
    timeout: Duration,
) -> Result<StreamingResponse, ClientError> {
    let parsed = url::Url::parse(url).map_err(|_| ClientError::InvalidUrl(url.to_string()))?;
    let method = parse_method(method, url)?;
    let request = build(&method, &parsed, headers, Bytes::from(body))?;
    let mut response = tokio::time::timeout(timeout, request.send())
        .await
        .map_err(|_| ClientError::Timeout {
            url: url.into(),
            timeout_ms: timeout.as_millis() as u64,
        })?
        .map_err(|e| send_error(&parsed, &e))?;
    Ok(StreamingResponse {
        status: response.status().as_u16(),
        headers: std::mem::take(response.headers_mut()),
        url: parsed,
        response,
    })
}

/// One request and its body, read up to `max_response_bytes`.
async fn exchange(
    method: &reqwest::Method,
    url: &url::Url,
    headers: &[(&str, &str)],
    body: Bytes,
    max_response_bytes: usize,
) -> Result<HttpResponse, ClientError> {
    let request = build(method, url, headers, body)?;
    let mut response = request.send().await.map_err(|e| send_error(url, &e))?;
    let too_large = || ClientError::TooLarge {
        url: url.to_string(),
        limit: max_response_bytes,
    };
    if response
        .content_length()
        .is_some_and(|length| length > max_response_bytes as u64)
    {
        return Err(too_large());
    }
    let status = response.status().as_u16();
    let headers = std::mem::take(response.headers_mut());
    let mut collected = BytesMut::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| send_error(url, &e))? {
        if collected.len() + chunk.len() > max_response_bytes {
            return Err(too_large());
        }
        collected.extend_from_slice(&chunk);
    }
    Ok(HttpResponse {
        status,
        headers,
        body: collected.freeze(),
    })
}

/// A request on the shared client.
fn build(
    method: &reqwest::Method,
    url: &url::Url,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Result<reqwest::RequestBuilder, ClientError> {
    let client = &tls::shared()
        .map_err(|e| ClientError::Request {
            url: url.to_string(),
            message: e.to_string(),
        })?
        .http;
    let mut builder = client.request(method.clone(), url.clone()).body(body);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    Ok(builder)
}

/// A failed exchange as the error its caller can act on: TLS failures name
/// their reason; others carry the whole cause chain (reqwest's own message
/// alone says little).
fn send_error(url: &url::Url, error: &reqwest::Error) -> ClientError {
    if let Some(reason) = tls::failure_reason(error) {
        return ClientError::Tls {
            url: url.to_string(),
            reason,
        };
    }
    if error.is_connect() && error.is_timeout() && url.scheme() == "https" {
        return ClientError::Tls {
            url: url.to_string(),
            reason: "handshake timeout: no TLS session (TCP connect included) in time".into(),
        };
    }
    let mut message = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    ClientError::Request {
        url: url.to_string(),
        message,
    }
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

    fn url(text: &str) -> url::Url {
        url::Url::parse(text).unwrap()
    }

    #[test]
    fn a_redirect_is_followed_only_to_an_allowed_host() {
        let allowed = vec!["127.0.0.1:8080".to_string(), "docs.example".to_string()];
        let here = url("http://127.0.0.1:8080/a/b");
        assert_eq!(next_hop(&here, 200, Some("/x"), &allowed).unwrap(), None);
        assert_eq!(next_hop(&here, 304, Some("/x"), &allowed).unwrap(), None);
        let relative = next_hop(&here, 302, Some("c?d=1"), &allowed).unwrap();
        assert_eq!(relative, Some(url("http://127.0.0.1:8080/a/c?d=1")));
        let other = next_hop(&here, 308, Some("https://docs.example/p"), &allowed).unwrap();
        assert_eq!(other, Some(url("https://docs.example/p")));
        match next_hop(&here, 307, Some("http://127.0.0.1:8081/p"), &allowed) {
            Err(ClientError::RedirectNotAllowed { host, to, .. }) => {
                assert_eq!(host, "127.0.0.1:8081");
                assert_eq!(to, "http://127.0.0.1:8081/p");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        // The default port follows the new scheme: https://docs.example:80 is not "docs.example".
        assert!(next_hop(&here, 301, Some("https://docs.example:80/"), &allowed).is_err());
        assert!(matches!(
            next_hop(&here, 302, Some("file:///etc/passwd"), &allowed),
            Err(ClientError::InvalidUrl(_))
        ));
        assert!(matches!(
            next_hop(&here, 302, None, &allowed),
            Err(ClientError::BadRedirect { status: 302, .. })
        ));
    }

    #[test]
    fn only_303_and_a_redirected_post_become_a_get() {
        assert!(rewrites_to_get(303, &reqwest::Method::PUT));
        assert!(rewrites_to_get(302, &reqwest::Method::POST));
        assert!(!rewrites_to_get(302, &reqwest::Method::GET));
        assert!(!rewrites_to_get(307, &reqwest::Method::POST));
        assert!(!rewrites_to_get(308, &reqwest::Method::POST));
    }

    /// A plain HTTP server answering each path from `routes` (status, Location, body).
    async fn serve(
        routes: Vec<(&'static str, u16, Option<String>, &'static str)>,
    ) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let routes = routes.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") && socket.read(&mut byte).await.unwrap_or(0) == 1 {
                        head.push(byte[0]);
                    }
                    let text = String::from_utf8_lossy(&head).to_string();
                    let path = text.split(' ').nth(1).unwrap_or("").to_string();
                    let (status, location, body) = routes
                        .iter()
                        .find(|route| route.0 == path)
                        .map(|route| (route.1, route.2.clone(), route.3))
                        .unwrap_or((404, None, "no route"));
                    let location = location.map(|l| format!("location: {l}\r\n")).unwrap_or_default();
                    let reply = format!(
                        "HTTP/1.1 {status} X\r\n{location}content-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(reply.as_bytes()).await;
                });
            }
        });
        (port, hits)
    }

    #[tokio::test]
    async fn request_within_follows_allowed_hops_and_refuses_the_rest() {
        let (elsewhere, elsewhere_hits) = serve(vec![("/", 200, None, "should not be reached")]).await;
        let (port, _) = serve(vec![
            ("/a", 302, Some("/b".into()), ""),
            ("/b", 200, None, "done"),
            ("/away", 302, Some(format!("http://127.0.0.1:{elsewhere}/")), ""),
            ("/loop", 302, Some("/loop".into()), ""),
        ])
        .await;
        let allowed = vec![format!("127.0.0.1:{port}")];
        let base = format!("http://127.0.0.1:{port}");
        let timeout = Duration::from_secs(5);
        let get = |path: &str| {
            let url = format!("{base}{path}");
            let allowed = allowed.clone();
            async move { request_within(&allowed, "GET", &url, &[], Vec::new(), timeout, 1024).await }
        };
        let followed = get("/a").await.unwrap();
        assert_eq!((followed.status, &followed.body[..]), (200, &b"done"[..]));
        let refused = get("/away")
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(refused.contains(&format!("127.0.0.1:{elsewhere}")), "{refused}");
        assert!(refused.contains("not allowed"), "{refused}");
        assert_eq!(elsewhere_hits.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert!(matches!(
            get("/loop").await,
            Err(ClientError::TooManyRedirects { .. })
        ));
        // Not on the list at all: refused before any connection.
        let outside = format!("http://127.0.0.1:{elsewhere}/");
        let result = request_within(&allowed, "GET", &outside, &[], Vec::new(), timeout, 1024).await;
        assert!(matches!(result, Err(ClientError::HostNotAllowed(_))));
        assert_eq!(elsewhere_hits.load(std::sync::atomic::Ordering::SeqCst), 0);
        // The plain call hands the redirect back instead of following it.
        let plain = request("GET", &format!("{base}/away"), &[], Vec::new(), timeout, 1024)
            .await
            .unwrap();
        assert_eq!(plain.status, 302);
        assert_eq!(elsewhere_hits.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_peer_that_never_completes_the_handshake_is_a_named_tls_failure() {
        // It accepts the TCP connection and then says nothing: no ServerHello ever comes.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let held = tokio::spawn(async move {
            let mut sockets = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                sockets.push(socket);
            }
        });
        let url = format!("https://127.0.0.1:{port}/");
        let result = request("GET", &url, &[], Vec::new(), Duration::from_secs(60), 1024).await;
        held.abort();
        match result {
            Err(ClientError::Tls { url: named, reason }) => {
                assert_eq!(named, url);
                assert!(reason.starts_with("handshake timeout"), "{reason}");
            }
            other => panic!("expected a TLS handshake timeout, got {:?}", other.err()),
        }
    }

    #[tokio::test]
    async fn a_response_over_the_limit_is_refused() {
        let (port, _) = serve(vec![("/big", 200, None, "0123456789")]).await;
        let url = format!("http://127.0.0.1:{port}/big");
        let result = request("GET", &url, &[], Vec::new(), Duration::from_secs(5), 9).await;
        assert!(matches!(result, Err(ClientError::TooLarge { limit: 9, .. })));
        let fits = request("GET", &url, &[], Vec::new(), Duration::from_secs(5), 10)
            .await
            .unwrap();
        assert_eq!(&fits.body[..], b"0123456789");
    }
}
