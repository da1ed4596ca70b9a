//! The node's outbound HTTP calls, all through the one pooled client of
//! [`super::tls`] (rustls, the shared trust roots): every call has a timeout and
//! a response-size cap, and only allowed hosts are reachable.
//!
//! Redirects are never followed by the client itself. [`request`] and [`post`]
//! hand a 3xx back to the caller as the response; [`request_within`] follows a
//! few hops, each checked against the same allow-list as the first URL, so a
//! peer on the list cannot send the node to a host that is not.
//!
//! Internal addresses (loopback, link-local, private, unique-local, CGNAT,
//! unspecified, and IPv6 forms carrying one) are refused where the connection
//! is made: [`CheckedResolver`], the shared client's resolver, resolves a name
//! once and hands the connector only the addresses [`AddressPolicy`] allows
//! (`outbound.allowed_private`), so a name on an allow-list, a redirect or a
//! rebinding DNS answer cannot point the node inside its own network, and no
//! second lookup can differ from the one checked. An IP literal never reaches
//! the resolver: it is reached because the operator wrote it (an
//! `outbound.allowed_hosts` entry, a configured endpoint), or, where nothing
//! lists it (an Almanac-resolved reply), only when [`check_unlisted`] finds it
//! public or in `outbound.allowed_private`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
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
    #[error(transparent)]
    InternalAddress(InternalAddressRefused),
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
    if let Some(refused) = internal_address_refused(error) {
        return ClientError::InternalAddress(refused);
    }
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

// --- Internal addresses --------------------------------------------------

/// Which internal addresses the node may reach, process-wide: the operator's
/// `outbound.allowed_private`. Set when the node starts; until then (a unit
/// test, a tool) no internal address is reachable by name.
#[derive(Debug, Clone, Default)]
pub struct AddressPolicy {
    allowed_private: Vec<IpRange>,
    /// The CLI: the operator typed the URL; there is no service behind it to protect.
    any: bool,
}

impl AddressPolicy {
    /// The policy `outbound.allowed_private` asks for, or the first entry that is not a range.
    pub fn from_ranges(ranges: &[String]) -> Result<AddressPolicy, String> {
        let allowed_private = ranges
            .iter()
            .map(|entry| IpRange::parse(entry).ok_or_else(|| entry.clone()))
            .collect::<Result<_, _>>()?;
        Ok(AddressPolicy {
            allowed_private,
            any: false,
        })
    }

    /// Every address allowed, for commands an operator runs by hand.
    pub fn any() -> AddressPolicy {
        AddressPolicy {
            allowed_private: Vec::new(),
            any: true,
        }
    }

    fn allows(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.any || !is_internal(ip) || self.allowed_private.iter().any(|range| range.contains(ip))
    }
}

static ADDRESS_POLICY: parking_lot::RwLock<Option<AddressPolicy>> = parking_lot::RwLock::new(None);

/// The policy `outbound.allowed_private` sets, or a configuration error naming the key.
pub fn address_policy(
    outbound: &crate::config::OutboundConfig,
) -> Result<AddressPolicy, crate::config::ConfigError> {
    AddressPolicy::from_ranges(&outbound.allowed_private).map_err(|entry| {
        crate::config::ConfigError::Invalid {
            key: "outbound.allowed_private",
            message: format!("{entry:?} is not an address range like \"10.0.0.0/8\" or \"fd00::/8\""),
        }
    })
}

/// Make `policy` the one every later connection is checked against.
pub fn set_address_policy(policy: AddressPolicy) {
    *ADDRESS_POLICY.write() = Some(policy);
}

fn address_allowed(ip: IpAddr) -> bool {
    ADDRESS_POLICY
        .read()
        .as_ref()
        .map_or_else(|| AddressPolicy::default().allows(ip), |policy| policy.allows(ip))
}

/// An address range, `10.0.0.0/8` or `fd00::/8`; a bare address is itself alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct IpRange {
    network: IpAddr,
    prefix: u8,
}

impl IpRange {
    fn parse(text: &str) -> Option<IpRange> {
        let (address, prefix) = match text.trim().split_once('/') {
            Some((address, prefix)) => (address, Some(prefix.parse::<u8>().ok()?)),
            None => (text.trim(), None),
        };
        let network = address.parse::<IpAddr>().ok()?.to_canonical();
        let bits = if network.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(bits);
        (prefix <= bits).then_some(IpRange { network, prefix })
    }

    fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip.to_canonical()) {
            (IpAddr::V4(network), IpAddr::V4(ip)) => same_prefix(
                u128::from(network.to_bits()) << 96,
                u128::from(ip.to_bits()) << 96,
                self.prefix,
            ),
            (IpAddr::V6(network), IpAddr::V6(ip)) => {
                same_prefix(network.to_bits(), ip.to_bits(), self.prefix)
            }
            _ => false,
        }
    }
}

/// Whether the first `prefix` bits of two left-aligned addresses agree.
fn same_prefix(a: u128, b: u128, prefix: u8) -> bool {
    prefix == 0 || (a ^ b) >> (128 - u32::from(prefix)) == 0
}

/// Loopback, link-local, private, unique-local, unspecified, CGNAT and the
/// IPv6 forms that carry such an IPv4 address: places inside the node's own
/// network that a peer, a plugin or a DNS answer must not send it to.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_broadcast()
                || a == 0
                || (a == 100 && (64..128).contains(&b))
        }
        IpAddr::V6(v6) => {
            let segments = v6.segments();
            let embedded_v4 = || {
                let [.., hi, lo] = segments;
                IpAddr::V4(Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo)))
            };
            v6.is_loopback()
                || v6.is_unspecified()
                || (segments[0] & 0xfe00) == 0xfc00
                || (segments[0] & 0xffc0) == 0xfe80
                || (segments[0] & 0xffc0) == 0xfec0
                // IPv4-compatible (::a.b.c.d) and NAT64 (64:ff9b::a.b.c.d) carry an IPv4 address.
                || (segments[..6] == [0; 6] && is_internal(embedded_v4()))
                || (segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] && is_internal(embedded_v4()))
        }
    }
}

/// A destination inside the node's network that nothing allows: an IP
/// literal, or a name whose every address is such.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "{destination} is inside the node's network; it is reached only at an IP literal listed in \
     outbound.allowed_hosts or within a range of outbound.allowed_private, never through a name"
)]
pub struct InternalAddressRefused {
    /// `host` for an IP literal, `host (addresses)` for a name.
    destination: String,
}

/// The shared client's resolver: a name resolves once, to its addresses the
/// policy allows, and the connection is made to one of those, so no second
/// lookup can swap in another address between the check and the connect.
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckedResolver;

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addresses = resolve_checked(&host, 0).await?;
            Ok(Box::new(addresses.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The addresses of `host:port` the node may connect to; an error when DNS
/// fails or every address is internal and not allowed.
pub async fn resolve_checked(
    host: &str,
    port: u16,
) -> Result<Vec<SocketAddr>, Box<dyn std::error::Error + Send + Sync>> {
    let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host, port)).await?.collect();
    let (allowed, refused): (Vec<SocketAddr>, Vec<SocketAddr>) = resolved
        .into_iter()
        .partition(|address| address_allowed(address.ip()));
    if allowed.is_empty() && !refused.is_empty() {
        let addresses = refused
            .iter()
            .map(|address| address.ip().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        return Err(Box::new(InternalAddressRefused {
            destination: format!("{host} ({addresses})"),
        }));
    }
    Ok(allowed)
}

/// A TCP connection to `uri`'s host and port for a client that is not
/// reqwest (the arena's WebSocket): an IP literal is dialled as written (the
/// operator configured it), a name only at the addresses [`resolve_checked`] allows.
pub async fn connect_tcp(
    uri: &axum::http::Uri,
) -> Result<tokio::net::TcpStream, Box<dyn std::error::Error + Send + Sync>> {
    let host = uri.host().ok_or("the URL names no host")?;
    let port = uri
        .port_u16()
        .or(match uri.scheme_str() {
            Some("https" | "wss") => Some(443),
            Some("http" | "ws") => Some(80),
            _ => None,
        })
        .ok_or("the URL's scheme has no default port")?;
    let literal = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>();
    let addresses = match literal {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => resolve_checked(host, port).await?,
    };
    Ok(tokio::net::TcpStream::connect(&addresses[..]).await?)
}

/// Check `url` may be reached as a destination a peer named rather than the
/// operator (an Almanac-resolved reply endpoint, an A2A push webhook): one
/// `allowed` lists; else, unless `listed_only`, one [`check_unlisted`]
/// accepts. The one outbound policy for such destinations, whoever asks.
pub fn check_destination(url: &str, allowed: &[String], listed_only: bool) -> Result<url::Url, ClientError> {
    match check_allowed(url, allowed) {
        Ok(listed) => Ok(listed),
        Err(unlisted) if listed_only => Err(unlisted),
        Err(_) => check_unlisted(url),
    }
}

/// Check `url` may be reached though no allow-list entry names it: http(s),
/// and a name (its addresses are checked when connecting) or an IP literal
/// that is public or in `outbound.allowed_private`.
pub fn check_unlisted(url: &str) -> Result<url::Url, ClientError> {
    let parsed = url::Url::parse(url).map_err(|_| ClientError::InvalidUrl(url.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(ClientError::InvalidUrl(url.to_string()));
    }
    let literal = match parsed.host() {
        Some(url::Host::Domain(_)) => return Ok(parsed),
        Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
        None => return Err(ClientError::InvalidUrl(url.to_string())),
    };
    if address_allowed(literal) {
        Ok(parsed)
    } else {
        Err(ClientError::InternalAddress(InternalAddressRefused {
            destination: literal.to_string(),
        }))
    }
}

/// The resolver's refusal, if that is what ended `error`.
fn internal_address_refused(error: &(dyn std::error::Error + 'static)) -> Option<InternalAddressRefused> {
    let mut next = Some(error);
    while let Some(current) = next {
        if let Some(refused) = current.downcast_ref::<InternalAddressRefused>() {
            return Some(refused.clone());
        }
        next = current.source();
    }
    None
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

    #[test]
    fn internal_addresses_are_told_from_public_ones_in_every_form() {
        let internal = [
            "127.0.0.1",
            "127.9.9.9",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "0.0.0.0",
            "255.255.255.255",
            "::1",
            "::",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:10.0.0.1",
            "::10.0.0.1",
            "64:ff9b::a9fe:a9fe",
        ];
        for text in internal {
            assert!(is_internal(text.parse().unwrap()), "{text} is internal");
        }
        let public = [
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "192.169.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ];
        for text in public {
            assert!(!is_internal(text.parse().unwrap()), "{text} is public");
        }
    }

    #[test]
    fn allowed_private_ranges_allow_what_they_cover_and_nothing_else() {
        let policy =
            AddressPolicy::from_ranges(&["10.0.0.0/8".into(), "fd00::/8".into(), "127.0.0.2".into()])
                .unwrap();
        let allows = |text: &str| policy.allows(text.parse().unwrap());
        assert!(allows("10.200.0.1") && allows("::ffff:10.0.0.1") && allows("fd00::5"));
        assert!(allows("127.0.0.2") && !allows("127.0.0.1") && !allows("192.168.0.1"));
        assert!(allows("8.8.8.8"), "public addresses need no range");
        assert!(!AddressPolicy::default().allows("127.0.0.1".parse().unwrap()));
        assert!(AddressPolicy::any().allows("127.0.0.1".parse().unwrap()));
        for bad in ["10.0.0.0/33", "fd00::/129", "localhost", "10.0.0.0/x", ""] {
            assert_eq!(AddressPolicy::from_ranges(&[bad.into()]).unwrap_err(), bad);
        }
    }

    #[test]
    fn an_unlisted_ip_literal_must_be_public_and_a_name_is_checked_later() {
        assert!(check_unlisted("https://93.184.216.34/submit").is_ok());
        assert!(check_unlisted("http://peer.example:8000/submit").is_ok());
        for url in [
            "http://127.0.0.1:9000/submit",
            "http://[::1]/",
            "http://[::ffff:10.0.0.1]/",
            "http://169.254.169.254/",
        ] {
            let error = check_unlisted(url).unwrap_err().to_string();
            assert!(error.contains("inside the node's network"), "{url}: {error}");
        }
        assert!(matches!(
            check_unlisted("ftp://8.8.8.8/"),
            Err(ClientError::InvalidUrl(_))
        ));
    }

    #[tokio::test]
    async fn a_name_resolving_to_loopback_is_refused_before_any_connection() {
        let (port, hits) = serve(vec![("/", 200, None, "inside")]).await;
        let url = format!("http://localhost:{port}/");
        let result = request("GET", &url, &[], Vec::new(), Duration::from_secs(5), 1024).await;
        match result {
            Err(ClientError::InternalAddress(refused)) => {
                let text = refused.to_string();
                assert!(
                    text.starts_with("localhost (") && text.contains("127.0.0.1"),
                    "{text}"
                );
            }
            other => panic!("expected a refusal, got {:?}", other.map(|r| r.status)),
        }
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);
    }
}
