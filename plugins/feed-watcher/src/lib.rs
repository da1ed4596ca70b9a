//! Watches an HTTP feed and serves `protocols/feed-watcher.md`: what it said
//! last and how often it changed. It uses three of the agent capabilities:
//!
//! - settings and a secret: `[plugins.feed-watcher.config] feed_url = "…"`,
//!   `poll_every = "30s"` (or a cron pattern), and an optional bearer token
//!   `[plugins.feed-watcher.secrets] feed_token = { env = "…" }`;
//! - outgoing HTTP (`wasi:http`, here through `wstd`), allowed to the feed's
//!   origin only, which the capabilities take from the setting (the operator
//!   lists the host in `outbound.allowed_hosts` too);
//! - a schedule: `tick("poll")` fetches the feed and records a change;
//!
//! and tells a uAgent of each change when `notify_agent` (its agent1…
//! address) and `notify_endpoint` (its `/submit` URL, which the operator lists
//! in `outbound.allowed_hosts`) are set: a uAgents `Message {text}` the node
//! signs as its own address (`host::outbound`, transport `uagents`).
//!
//! With no `feed_url` configured (the embedded default) it watches nothing.

use agora_plugin_sdk::prelude::*;

struct FeedWatcher;

const DOCUMENT: &str = include_str!("../../../protocols/feed-watcher.md");
/// What is kept of the feed's text, and served.
const MAX_CONTENT: usize = 4096;
/// How much of the new text a change notification quotes.
const MAX_QUOTE: usize = 200;

impl Plugin for FeedWatcher {
    fn manifest() -> Manifest {
        Manifest::new("feed-watcher", env!("CARGO_PKG_VERSION"))
            .description("Watches an HTTP feed on a schedule and tells what it said last")
            .protocol(DOCUMENT)
    }

    fn capabilities() -> Capabilities {
        let every = setting("poll_every").unwrap_or_else(|| "30s".to_string());
        let capabilities = Capabilities::new().every("poll", &every);
        match setting("feed_url").as_deref().and_then(origin) {
            Some(origin) => capabilities.allow_host(&origin),
            None => capabilities,
        }
    }

    fn handle(_message: Message) -> Result<String, Failure> {
        let content: Option<String> = host::kv_get_json("content")?;
        let changes: u64 = host::kv_get_json("changes")?.unwrap_or(0);
        let last_change: Option<u64> = host::kv_get_json("last_change_ms")?;
        let error: Option<String> = host::kv_get_json("error")?;
        let notified: u64 = host::kv_get_json("notified")?.unwrap_or(0);
        let notify_error: Option<String> = host::kv_get_json("notify_error")?;
        reply(json!({
            "feed": host::config_get("feed_url")?,
            "changes": changes,
            "last_change_ms": last_change,
            "content": content,
            "error": error,
            "notified": notified,
            "notify_error": notify_error,
        }))
    }

    fn tick(name: String) -> Result<(), String> {
        if name != "poll" {
            return Err(format!("no schedule {name:?}"));
        }
        let Some(url) = setting("feed_url") else {
            return Ok(());
        };
        let token = host::config_get("feed_token").map_err(|e| e.to_string())?;
        let fetched = fetch(&url, token.as_deref());
        let outcome = match fetched {
            Ok(text) => record(&url, text),
            Err(error) => host::kv_set_json("error", &error),
        };
        outcome.map_err(|e| e.to_string())
    }
}

fn setting(key: &str) -> Option<String> {
    host::config_get(key)
        .ok()
        .flatten()
        .filter(|value| !value.is_empty())
}

/// `scheme://host[:port]` of a URL, as capabilities name an origin.
fn origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    (!authority.is_empty()).then(|| format!("{scheme}://{authority}"))
}

/// The feed's text (cut to [`MAX_CONTENT`] bytes), or why it could not be read.
fn fetch(url: &str, token: Option<&str>) -> Result<String, String> {
    wstd::runtime::block_on(async {
        let mut request = wstd::http::Request::get(url);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let request = request
            .body(wstd::http::Body::empty())
            .map_err(|e| e.to_string())?;
        let response = wstd::http::Client::new()
            .send(request)
            .await
            .map_err(|e| format!("{url}: {e:?}"))?;
        if !response.status().is_success() {
            return Err(format!("{url} answered {}", response.status()));
        }
        let mut body = response.into_body();
        let bytes = body.contents().await.map_err(|e| format!("{url}: {e:?}"))?;
        let mut text = String::from_utf8_lossy(bytes).into_owned();
        let mut end = text.len().min(MAX_CONTENT);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        Ok(text)
    })
}

/// Keep the feed's text; count it as a change when it differs from the last,
/// and tell the configured uAgent.
fn record(url: &str, text: String) -> Result<(), HostError> {
    host::kv_delete("error")?;
    let previous: Option<String> = host::kv_get_json("content")?;
    if previous.as_deref() == Some(text.as_str()) {
        return Ok(());
    }
    let changes: u64 = host::kv_get_json("changes")?.unwrap_or(0);
    host::kv_set_json("content", &text)?;
    host::kv_set_json("changes", &(changes + 1))?;
    host::kv_set_json("last_change_ms", &host::now_ms())?;
    host::info(&format!("the feed changed ({} bytes)", text.len()));
    notify(url, &text)
}

/// Send the change to `notify_agent` when one is configured. A failed send is
/// kept for `handle` to show (and the change stays recorded): the next change
/// is sent anew, and nothing is retried behind the operator's back.
fn notify(url: &str, text: &str) -> Result<(), HostError> {
    let (Some(agent), Some(endpoint)) = (setting("notify_agent"), setting("notify_endpoint")) else {
        return Ok(());
    };
    let mut end = text.len().min(MAX_QUOTE);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let message = json!({
        "target": agent,
        // pydantic's schema of uAgents' `class Message(Model): text: str`, what
        // the uagents-echo example speaks; the node derives its digest.
        "schema": {
            "properties": {"text": {"title": "Text", "type": "string"}},
            "required": ["text"], "title": "Message", "type": "object",
        },
        "message": {"text": format!("{url} changed: {}", &text[..end])},
    });
    match host::outbound(Transport::Uagents, &endpoint, &message) {
        Ok(_) => {
            let notified: u64 = host::kv_get_json("notified")?.unwrap_or(0);
            host::kv_delete("notify_error")?;
            host::kv_set_json("notified", &(notified + 1))
        }
        Err(error) => host::kv_set_json("notify_error", &error.to_string()),
    }
}

export_plugin!(FeedWatcher);
