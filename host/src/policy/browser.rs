//! The browser policy: what a web page may reach, one rule for every endpoint a
//! page can load or call (HAI's page, `/ws` and history, `/a2a` and its card,
//! `/mcp`). Each transport wraps its router in [`guard`] and maps a
//! [`BrowserRefusal`] to its own error shape; none keeps a copy of the rule.
//!
//! Two attacks shape it:
//! - **A foreign page** the user visits sends requests to a node on the user's
//!   machine or network. Its `Origin` names its own site, so an `Origin` must
//!   be the node's own (the request's `Host`) or one the operator listed.
//!   A JSON-RPC POST must say `application/json`: a page may send `text/plain`
//!   without asking the node first (a CORS "simple request"), JSON it may not.
//! - **DNS rebinding**: the page points its own name at the node's address,
//!   so its requests are same-origin — `Origin` and `Host` both name the
//!   attacker's domain, and a same-origin GET carries no `Origin` at all. Only
//!   the `Host` header tells, so it must be one of the node's own names:
//!   `http.public_hosts`, the hosts of `uagents.public_endpoint` and
//!   `a2a.public_url`, and on a loopback listener the loopback names and the
//!   listen address. Names are compared without their port: a rebinding page
//!   cannot choose the host name its browser sends, only the port.
//!
//! A node listening beyond loopback without `http.public_hosts` cannot know its
//! names; it then takes any `Host` (the same-origin rule still holds) and says
//! so at start-up. Clients without a browser send no `Origin` and are
//! unaffected on any of the node's names.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use crate::config::{Config, normalise_origin, parse_listen, strip_default_port};

/// Why a browser's request was refused, before any handler ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrowserRefusal {
    #[error("Misdirected request: {0:?} is not one of this node's names; list it in http.public_hosts")]
    UnknownHost(String),
    #[error("Forbidden: requests from the browser origin {origin:?} are not allowed; list it in {key}")]
    Origin { origin: String, key: &'static str },
    #[error("Unsupported Media Type: a request body must be sent as Content-Type: application/json")]
    NotJson,
}

impl BrowserRefusal {
    /// The HTTP status every transport answers it with: 421 for a name the node
    /// does not serve (the client reached the wrong server), 403 for a foreign
    /// page, 415 for a body that is not JSON.
    pub fn status(&self) -> StatusCode {
        match self {
            BrowserRefusal::UnknownHost(_) => StatusCode::MISDIRECTED_REQUEST,
            BrowserRefusal::Origin { .. } => StatusCode::FORBIDDEN,
            BrowserRefusal::NotJson => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        }
    }
}

/// The `Host` names the node answers browsers on.
#[derive(Debug, Clone)]
enum Names {
    /// Lower-case host names and addresses, IPv6 in brackets, without ports.
    Listed(Vec<String>),
    /// A listener beyond loopback and no `http.public_hosts`: any name.
    Any,
}

/// The node's browser policy, built once from its configuration.
#[derive(Debug, Clone)]
pub struct BrowserPolicy {
    names: Names,
}

/// Which POSTs of an endpoint must say `Content-Type: application/json`: a
/// page can send a cross-site form (or a `fetch` without preflight) only as
/// `text/plain`, a form or multipart, so requiring JSON keeps other pages'
/// bodies out even before the `Origin` check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonPosts {
    /// None (the endpoint reads no JSON bodies, or checks its own).
    Unchecked,
    /// Every POST (JSON-RPC: a body is the request).
    All,
    /// Every POST that carries a body (HTTP+JSON, whose `:cancel` and
    /// `:subscribe` POSTs come with none and no `Content-Type`): with no body
    /// there is nothing another page could smuggle in.
    WithBody,
}

impl JsonPosts {
    fn must_be_json(self, method: &Method, headers: &HeaderMap) -> bool {
        let applies = match self {
            JsonPosts::Unchecked => false,
            JsonPosts::All => true,
            JsonPosts::WithBody => carries_body(headers) || headers.contains_key(header::CONTENT_TYPE),
        };
        applies && method == Method::POST && !super::is_json_content_type(headers)
    }
}

/// Whether a request says it has a body: a non-zero `Content-Length`, or any
/// `Transfer-Encoding` (a chunked body's length is not known ahead).
fn carries_body(headers: &HeaderMap) -> bool {
    if headers.contains_key(header::TRANSFER_ENCODING) {
        return true;
    }
    headers
        .get(header::CONTENT_LENGTH)
        .is_some_and(|length| length.to_str().ok().and_then(|l| l.trim().parse::<u64>().ok()) != Some(0))
}

/// One endpoint's use of the policy.
#[derive(Clone)]
pub struct Endpoint {
    /// Origins listed for this endpoint besides the node's own, and the key listing them.
    pub allowed_origins: Vec<String>,
    pub origins_key: &'static str,
    /// Which of its POSTs must be `application/json`.
    pub json_posts: JsonPosts,
    /// How the transport answers a refusal, in its own protocol's shape.
    pub refuse: fn(BrowserRefusal) -> Response,
}

impl BrowserPolicy {
    pub fn new(config: &Config) -> BrowserPolicy {
        let mut names: Vec<String> = config.http.public_hosts.iter().map(|h| host_only(h)).collect();
        for url in [&config.uagents.public_endpoint, &config.a2a.public_url] {
            if let Some(host) = url::Url::parse(url)
                .ok()
                .and_then(|u| u.host_str().map(str::to_string))
            {
                names.push(host.to_ascii_lowercase());
            }
        }
        let mut beyond_loopback = false;
        for listen in listen_addresses(config) {
            if listen.ip().is_loopback() {
                names.extend(["localhost", "127.0.0.1", "[::1]"].map(String::from));
                names.push(bracketed(listen.ip()));
            } else {
                beyond_loopback = true;
            }
        }
        names.sort();
        names.dedup();
        let names = if beyond_loopback && config.http.public_hosts.is_empty() {
            Names::Any
        } else {
            Names::Listed(names)
        };
        BrowserPolicy { names }
    }

    /// What a listener beyond loopback accepts when `http.public_hosts` is not
    /// set, for the start-up log; `None` when every name is known.
    pub fn open_names_warning(&self) -> Option<&'static str> {
        matches!(self.names, Names::Any).then_some(
            "a listener is beyond loopback and http.public_hosts is not set: browser requests are \
             accepted under any Host name, so a DNS-rebinding page can reach the chat, A2A and MCP; \
             set http.public_hosts to the names clients use",
        )
    }

    /// The checks, in order: `Host`, then `Origin`, then a JSON-RPC body's type.
    pub fn check(
        &self,
        endpoint: &Endpoint,
        method: &Method,
        headers: &HeaderMap,
    ) -> Result<(), BrowserRefusal> {
        let host = headers
            .get(header::HOST)
            .map(|value| String::from_utf8_lossy(value.as_bytes()).to_ascii_lowercase())
            .unwrap_or_default();
        if let Names::Listed(names) = &self.names
            && !names.contains(&host_only(&host))
        {
            return Err(BrowserRefusal::UnknownHost(shown(&host)));
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = String::from_utf8_lossy(origin.as_bytes());
            if !origin_allowed(&origin, &host, &endpoint.allowed_origins) {
                return Err(BrowserRefusal::Origin {
                    origin: shown(&origin),
                    key: endpoint.origins_key,
                });
            }
        }
        if endpoint.json_posts.must_be_json(method, headers) {
            return Err(BrowserRefusal::NotJson);
        }
        Ok(())
    }
}

/// Wrap `router` so every request to it passes the policy first.
pub fn guard(router: Router, policy: Arc<BrowserPolicy>, endpoint: Endpoint) -> Router {
    let endpoint = Arc::new(endpoint);
    router.layer(axum::middleware::from_fn(move |request: Request, next: Next| {
        let (policy, endpoint) = (policy.clone(), endpoint.clone());
        async move {
            match policy.check(&endpoint, request.method(), request.headers()) {
                Ok(()) => next.run(request).await,
                Err(refusal) => {
                    tracing::debug!(%refusal, path = request.uri().path(), "browser policy refused a request");
                    (endpoint.refuse)(refusal)
                }
            }
        }
    }))
}

/// Same origin (the page's scheme and authority are the `Host` it asked, which
/// the name check has vouched for) or listed.
fn origin_allowed(origin: &str, host: &str, listed: &[String]) -> bool {
    let Some(normalised) = normalise_origin(origin) else {
        return false;
    };
    if listed
        .iter()
        .any(|entry| normalise_origin(entry).as_deref() == Some(normalised.as_str()))
    {
        return true;
    }
    normalised
        .split_once("://")
        .is_some_and(|(scheme, authority)| strip_default_port(scheme, host) == authority)
}

/// Every address the node listens on: the shared listener and each section's own.
fn listen_addresses(config: &Config) -> Vec<SocketAddr> {
    let own = [
        &config.agora.listen,
        &config.envelopes.listen,
        &config.uagents.listen,
        &config.arena.listen,
        &config.hai.listen,
        &config.a2a.listen,
        &config.mcp.listen,
    ];
    std::iter::once(&config.listen)
        .chain(own.into_iter().filter(|listen| !listen.is_empty()))
        .filter_map(|listen| parse_listen("listen", listen).ok())
        .collect()
}

/// `host[:port]` → `host`, lower case; an IPv6 literal keeps its brackets.
fn host_only(authority: &str) -> String {
    split_authority(authority.trim()).0.to_ascii_lowercase()
}

/// `host[:port]` as its host and its port, when it has one: an IPv6 literal
/// in brackets keeps them, and one without brackets has no port to split off.
pub fn split_authority(authority: &str) -> (&str, Option<&str>) {
    if authority.starts_with('[') {
        return match authority.find(']') {
            Some(end) => {
                let port = authority[end + 1..].strip_prefix(':');
                (&authority[..=end], port.filter(|port| is_port(port)))
            }
            None => (authority, None),
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if is_port(port) && !host.contains(':') => (host, Some(port)),
        _ => (authority, None),
    }
}

fn is_port(text: &str) -> bool {
    text.bytes().all(|b| b.is_ascii_digit())
}

fn bracketed(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

/// A client's header value as an error may quote it: at most 200 characters.
fn shown(value: &str) -> String {
    value.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::policy::header_map as headers;

    fn endpoint(listed: &[&str]) -> Endpoint {
        Endpoint {
            allowed_origins: listed.iter().map(|s| s.to_string()).collect(),
            origins_key: "test.allowed_origins",
            json_posts: JsonPosts::All,
            refuse: |refusal| axum::response::IntoResponse::into_response(refusal.status()),
        }
    }

    fn loopback() -> BrowserPolicy {
        BrowserPolicy::new(&Config::defaults())
    }

    #[test]
    fn loopback_names_pass_and_a_rebinding_name_does_not() {
        let policy = loopback();
        let get = Method::GET;
        for host in ["127.0.0.1:8080", "localhost:8080", "LOCALHOST", "[::1]:8080"] {
            assert!(
                policy
                    .check(&endpoint(&[]), &get, &headers(&[("host", host)]))
                    .is_ok(),
                "{host}"
            );
        }
        let rebound = headers(&[
            ("host", "evil.example:8080"),
            ("origin", "http://evil.example:8080"),
        ]);
        assert_eq!(
            policy.check(&endpoint(&[]), &get, &rebound),
            Err(BrowserRefusal::UnknownHost("evil.example:8080".into()))
        );
        assert!(
            policy
                .check(&endpoint(&[]), &get, &headers(&[("host", "evil.example")]))
                .is_err()
        );
        assert!(policy.check(&endpoint(&[]), &get, &HeaderMap::new()).is_err());
    }

    #[test]
    fn origins_same_as_host_or_listed() {
        let policy = loopback();
        let get = Method::GET;
        let same = headers(&[("host", "127.0.0.1:8080"), ("origin", "http://127.0.0.1:8080")]);
        assert!(policy.check(&endpoint(&[]), &get, &same).is_ok());
        let foreign = headers(&[("host", "127.0.0.1:8080"), ("origin", "http://evil.example")]);
        assert!(matches!(
            policy.check(&endpoint(&[]), &get, &foreign),
            Err(BrowserRefusal::Origin {
                key: "test.allowed_origins",
                ..
            })
        ));
        assert!(
            policy
                .check(&endpoint(&["http://evil.example:80"]), &get, &foreign)
                .is_ok()
        );
        let other_port = headers(&[("host", "127.0.0.1:8080"), ("origin", "http://127.0.0.1:9999")]);
        assert!(policy.check(&endpoint(&[]), &get, &other_port).is_err());
        let null = headers(&[("host", "127.0.0.1:8080"), ("origin", "null")]);
        assert!(policy.check(&endpoint(&[]), &get, &null).is_err());
    }

    #[test]
    fn json_rpc_posts_must_be_json() {
        let policy = loopback();
        let plain = headers(&[("host", "127.0.0.1:8080"), ("content-type", "text/plain")]);
        assert_eq!(
            policy.check(&endpoint(&[]), &Method::POST, &plain),
            Err(BrowserRefusal::NotJson)
        );
        assert!(policy.check(&endpoint(&[]), &Method::GET, &plain).is_ok());
        let json = headers(&[
            ("host", "127.0.0.1:8080"),
            ("content-type", "application/json; charset=utf-8"),
        ]);
        assert!(policy.check(&endpoint(&[]), &Method::POST, &json).is_ok());
        let bodiless = headers(&[("host", "127.0.0.1:8080"), ("content-length", "0")]);
        assert_eq!(
            policy.check(&endpoint(&[]), &Method::POST, &bodiless),
            Err(BrowserRefusal::NotJson)
        );
    }

    #[test]
    fn rest_posts_without_a_body_need_no_content_type() {
        let policy = loopback();
        let rest = Endpoint {
            json_posts: JsonPosts::WithBody,
            ..endpoint(&[])
        };
        let host = ("host", "127.0.0.1:8080");
        for bodiless in [vec![host], vec![host, ("content-length", "0")]] {
            assert!(policy.check(&rest, &Method::POST, &headers(&bodiless)).is_ok());
        }
        for refused in [
            vec![host, ("content-length", "2")],
            vec![host, ("transfer-encoding", "chunked")],
            vec![host, ("content-type", "text/plain")],
            vec![host, ("content-length", "0"), ("content-type", "text/plain")],
        ] {
            assert_eq!(
                policy.check(&rest, &Method::POST, &headers(&refused)),
                Err(BrowserRefusal::NotJson),
                "{refused:?}"
            );
        }
        let foreign = headers(&[host, ("origin", "http://evil.example")]);
        assert!(policy.check(&rest, &Method::POST, &foreign).is_err());
    }

    #[test]
    fn public_listener_names_come_from_the_settings() {
        let mut config = Config::defaults();
        config.listen = "0.0.0.0:8080".into();
        let open = BrowserPolicy::new(&config);
        assert!(open.open_names_warning().is_some());
        assert!(
            open.check(
                &endpoint(&[]),
                &Method::GET,
                &headers(&[("host", "anything.example")])
            )
            .is_ok()
        );
        config.http.public_hosts = vec!["Agent.Example.org".into()];
        config.a2a.public_url = "https://a2a.example.org/base".into();
        let named = BrowserPolicy::new(&config);
        assert!(named.open_names_warning().is_none());
        for host in ["agent.example.org", "agent.example.org:8443", "a2a.example.org"] {
            assert!(
                named
                    .check(&endpoint(&[]), &Method::GET, &headers(&[("host", host)]))
                    .is_ok(),
                "{host}"
            );
        }
        assert!(
            named
                .check(
                    &endpoint(&[]),
                    &Method::GET,
                    &headers(&[("host", "127.0.0.1:8080")])
                )
                .is_err()
        );
    }

    #[test]
    fn host_only_keeps_the_name() {
        assert_eq!(host_only("Example.org:8080"), "example.org");
        assert_eq!(host_only("[::1]:80"), "[::1]");
        assert_eq!(host_only("example.org"), "example.org");
        assert_eq!(
            split_authority("agent.example.org:443"),
            ("agent.example.org", Some("443"))
        );
        assert_eq!(split_authority("[::1]"), ("[::1]", None));
        assert_eq!(split_authority("[::1]:8080"), ("[::1]", Some("8080")));
    }
}
