//! What a plugin asks of the host beyond answering messages: the optional
//! `agora:node/extensions` export's `capabilities` (world `agent` in the WIT).
//!
//! It is JSON text rather than a WIT record so that it can grow without
//! breaking plugins built before a field existed (a record that gains a field
//! no longer matches the components built against it). Like a manifest it is
//! untrusted input: bounded, names restricted, every schedule parsed here, and
//! unknown keys refused, so a plugin built for a newer node is told at load
//! what this one cannot give it rather than finding out at run time. A plugin
//! without the export has no capabilities, which is what plugins built for
//! the world `plugin` alone get.
//!
//! It also declares what MCP clients are shown of the plugin: its prompts
//! (rendered by the optional `agora:node/prompts` export, [`super::prompts`])
//! and the media type of its protocol documents (MCP resources; Markdown
//! unless declared).

use std::collections::BTreeMap;
use std::str::FromStr as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::http::Destination;

const MAX_ITEMS: usize = 16;
/// Room for [`MAX_PROMPTS`] prompts with their descriptions; each part is bounded too.
const MAX_CAPABILITIES_BYTES: usize = 256 * 1024;
/// Prompts per plugin, as tools per manifest.
const MAX_PROMPTS: usize = 64;
const MAX_PROMPT_ARGUMENTS: usize = 16;
/// `type/subtype` with parameters, as RFC 6838 bounds each name at 127.
const MAX_MIME_TYPE: usize = 255;
/// The key of [`Capabilities::documents`] for every document without a key of its own.
pub const DEFAULT_DOCUMENT: &str = "default";
/// Schedules run at most this often, so a plugin cannot make the host spin.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Default, Serialize)]
pub struct Capabilities {
    /// Model providers the plugin may use: `default` (`[llm]`) or a name of `[llm.providers]`.
    pub llm: Vec<String>,
    pub schedules: Vec<Schedule>,
    /// Where the plugin's outgoing HTTP (`wasi:http`) may go; the operator's
    /// `outbound.allowed_hosts` must list each too.
    pub allowed_hosts: Vec<Destination>,
    /// What MCP's `prompts/list` shows of the plugin, in the order declared.
    pub prompts: Vec<Prompt>,
    /// The media type of a protocol document, by its SHA1 (hex) or [`DEFAULT_DOCUMENT`].
    pub documents: BTreeMap<String, DocumentType>,
}

impl Capabilities {
    /// The declared media type of the document whose SHA1 is `hash`, if any.
    pub fn document_mime_type(&self, hash: &str) -> Option<&str> {
        self.documents
            .get(hash)
            .or_else(|| self.documents.get(DEFAULT_DOCUMENT))
            .map(|declared| declared.mime_type.as_str())
    }

    pub fn prompt(&self, name: &str) -> Option<&Prompt> {
        self.prompts.iter().find(|prompt| prompt.name == name)
    }
}

/// A prompt template the plugin renders on request (MCP's `Prompt`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Prompt {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub arguments: Vec<PromptArgument>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PromptArgument {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// A render without it is refused before the plugin is called.
    #[serde(default)]
    pub required: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DocumentType {
    pub mime_type: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Schedule {
    pub name: String,
    /// As the plugin wrote it (`30s`, `*/5 * * * *`).
    pub every: String,
    #[serde(skip)]
    pub when: When,
}

/// How a schedule's next run is found.
#[derive(Debug, Clone)]
pub enum When {
    /// Every so long, at the multiples of the interval since the Unix epoch,
    /// so that every node of a fleet finds the same due times.
    Interval(Duration),
    /// A cron pattern, in UTC.
    Cron(Box<croner::Cron>),
}

impl When {
    /// When the next run is due after `now_ms` (milliseconds since the Unix
    /// epoch): the same instant on every node, which a fleet claims once.
    pub fn next_due(&self, now_ms: u64) -> u64 {
        match self {
            When::Interval(interval) => {
                let step = (interval.as_millis() as u64).max(MIN_INTERVAL.as_millis() as u64);
                (now_ms / step + 1) * step
            }
            When::Cron(cron) => chrono::DateTime::from_timestamp_millis(now_ms as i64)
                .and_then(|now| cron.find_next_occurrence(&now, false).ok())
                // Whole seconds: croner carries `now`'s milliseconds into the
                // occurrence, which would differ from node to node.
                .map(|next| next.timestamp() as u64 * 1000)
                // A pattern with no next occurrence (as parsed, none): try again in a minute.
                .unwrap_or(now_ms + 60_000),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCapabilities {
    #[serde(default)]
    llm: Vec<String>,
    #[serde(default)]
    schedules: Vec<RawSchedule>,
    #[serde(default)]
    allowed_hosts: Vec<String>,
    #[serde(default)]
    prompts: Vec<Prompt>,
    #[serde(default)]
    documents: BTreeMap<String, DocumentType>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSchedule {
    name: String,
    every: String,
}

impl Capabilities {
    /// Validate what a plugin's `capabilities` export returned.
    pub fn parse(text: &str) -> Result<Capabilities, String> {
        if text.len() > MAX_CAPABILITIES_BYTES {
            return Err(format!("capabilities are over {MAX_CAPABILITIES_BYTES} bytes"));
        }
        let raw: RawCapabilities =
            serde_json::from_str(text).map_err(|e| format!("capabilities are not valid: {e}"))?;
        if raw.llm.len() > MAX_ITEMS || raw.schedules.len() > MAX_ITEMS || raw.allowed_hosts.len() > MAX_ITEMS
        {
            return Err(format!(
                "capabilities list at most {MAX_ITEMS} providers, schedules and allowed hosts"
            ));
        }
        let allowed_hosts = raw
            .allowed_hosts
            .iter()
            .map(|text| parse_destination(text))
            .collect::<Result<Vec<_>, _>>()?;
        for provider in &raw.llm {
            super::manifest::check_name("model provider", provider)?;
        }
        let mut schedules: Vec<Schedule> = Vec::new();
        for raw in raw.schedules {
            super::manifest::check_name("schedule", &raw.name)?;
            if schedules.iter().any(|s| s.name == raw.name) {
                return Err(format!("schedule {:?} is declared twice", raw.name));
            }
            let when =
                parse_every(&raw.every).map_err(|reason| format!("schedule {:?}: {reason}", raw.name))?;
            schedules.push(Schedule {
                name: raw.name,
                every: raw.every,
                when,
            });
        }
        check_prompts(&raw.prompts)?;
        check_documents(&raw.documents)?;
        Ok(Capabilities {
            llm: raw.llm,
            schedules,
            allowed_hosts,
            prompts: raw.prompts,
            documents: raw.documents,
        })
    }
}

/// Names like tools' (unique here; across plugins, the registry's routes), texts bounded.
fn check_prompts(prompts: &[Prompt]) -> Result<(), String> {
    use super::manifest::{MAX_TEXT, check_name, check_text};
    if prompts.len() > MAX_PROMPTS {
        return Err(format!("capabilities declare more than {MAX_PROMPTS} prompts"));
    }
    for (index, prompt) in prompts.iter().enumerate() {
        check_name("prompt", &prompt.name)?;
        if prompts[..index].iter().any(|other| other.name == prompt.name) {
            return Err(format!("prompt {:?} is declared twice", prompt.name));
        }
        check_text("prompt description", &prompt.description, MAX_TEXT)?;
        if prompt.arguments.len() > MAX_PROMPT_ARGUMENTS {
            return Err(format!(
                "prompt {:?} has more than {MAX_PROMPT_ARGUMENTS} arguments",
                prompt.name
            ));
        }
        for (index, argument) in prompt.arguments.iter().enumerate() {
            check_name("prompt argument", &argument.name)?;
            if prompt.arguments[..index]
                .iter()
                .any(|other| other.name == argument.name)
            {
                return Err(format!(
                    "prompt {:?} names argument {:?} twice",
                    prompt.name, argument.name
                ));
            }
            check_text("prompt argument description", &argument.description, MAX_TEXT)?;
        }
    }
    Ok(())
}

/// Keys are a document's SHA1 in lower-case hex or `default`; values a media type
/// `type/subtype` (parameters allowed), which MCP clients are shown as is.
fn check_documents(documents: &BTreeMap<String, DocumentType>) -> Result<(), String> {
    if documents.len() > super::manifest::MAX_ITEMS + 1 {
        return Err("capabilities declare the media type of more documents than a plugin has".into());
    }
    for (key, declared) in documents {
        let is_sha1 = key.len() == 40 && key.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'));
        if key != DEFAULT_DOCUMENT && !is_sha1 {
            return Err(format!(
                "documents key {:?} must be a document's SHA1 (lower-case hex) or {DEFAULT_DOCUMENT:?}",
                key.chars().take(64).collect::<String>()
            ));
        }
        let mime = declared.mime_type.as_str();
        let token = |part: &str| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "!#$&-^_.+".contains(c))
        };
        let essence = mime.split(';').next().unwrap_or_default().trim();
        let well_formed = mime.len() <= MAX_MIME_TYPE
            && !mime.chars().any(|c| c.is_control())
            && essence
                .split_once('/')
                .is_some_and(|(kind, subtype)| token(kind) && token(subtype));
        if !well_formed {
            return Err(format!(
                "document {key}: mime_type {:?} is not a media type like \"text/plain\"",
                mime.chars().take(64).collect::<String>()
            ));
        }
    }
    Ok(())
}

/// `https://api.example.org` or `http://127.0.0.1:9000`: a scheme, a host and (else the
/// scheme's) port, nothing more — no path, no wildcard, so a declaration says exactly
/// where the plugin's requests go.
fn parse_destination(text: &str) -> Result<Destination, String> {
    let refuse = || format!("allowed host {text:?} must be scheme://host[:port], http or https");
    let url = url::Url::parse(text).map_err(|_| refuse())?;
    let bare = matches!(url.path(), "" | "/") && url.query().is_none() && url.username().is_empty();
    if !bare || text.contains('*') {
        return Err(refuse());
    }
    Destination::of_url(&url).ok_or_else(refuse)
}

/// `30s`, `5m`, `1h 30m` (at least a second), or a cron pattern of five fields (six with seconds).
fn parse_every(every: &str) -> Result<When, String> {
    let every = every.trim();
    if every.split_whitespace().count() >= 5 {
        return croner::Cron::from_str(every)
            .map(|cron| When::Cron(Box::new(cron)))
            .map_err(|e| format!("{every:?} is not a cron pattern: {e}"));
    }
    let interval = humantime::parse_duration(every)
        .map_err(|e| format!("{every:?} is not a duration like \"30s\": {e}"))?;
    if interval < MIN_INTERVAL {
        return Err(format!("{every:?} is more often than once a second"));
    }
    Ok(When::Interval(interval))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_and_cron_patterns_are_read() {
        let parsed = Capabilities::parse(
            r#"{"llm": ["default"], "schedules": [{"name": "poll", "every": "30s"},
                {"name": "nightly", "every": "0 3 * * *"}]}"#,
        )
        .unwrap();
        assert_eq!(parsed.llm, ["default"]);
        assert!(matches!(parsed.schedules[0].when, When::Interval(d) if d == Duration::from_secs(30)));
        // 2026-12-02T10:00:00.250Z: the interval's next multiple, and 03:00 the next day.
        let now = 1_796_205_600_250;
        assert_eq!(parsed.schedules[0].when.next_due(now), 1_796_205_630_000);
        assert_eq!(parsed.schedules[1].when.next_due(now), 1_796_266_800_000);
    }

    #[test]
    fn what_the_host_cannot_give_is_refused_at_load() {
        for bad in [
            r#"{"llm": ["default"], "gpu": true}"#,
            r#"{"schedules": [{"name": "fast", "every": "10ms"}]}"#,
            r#"{"schedules": [{"name": "x", "every": "often"}]}"#,
            r#"{"schedules": [{"name": "x", "every": "99 * * * *"}]}"#,
            r#"{"schedules": [{"name": "x", "every": "1s"}, {"name": "x", "every": "2s"}]}"#,
            r#"{"llm": ["Not A Name"]}"#,
            "not json",
        ] {
            assert!(Capabilities::parse(bad).is_err(), "{bad}");
        }
        assert!(Capabilities::parse("{}").unwrap().schedules.is_empty());
    }

    #[test]
    fn prompts_and_document_types_are_read() {
        let sha1 = "a".repeat(40);
        let parsed = Capabilities::parse(&format!(
            r#"{{"prompts": [{{"name": "convert", "description": "Convert a quantity.",
                "arguments": [{{"name": "quantity", "description": "e.g. 3 km", "required": true}},
                              {{"name": "to"}}]}}],
              "documents": {{"default": {{"mime_type": "text/plain"}},
                             "{sha1}": {{"mime_type": "text/markdown; charset=utf-8"}}}}}}"#
        ))
        .unwrap();
        let prompt = parsed.prompt("convert").unwrap();
        assert_eq!(prompt.arguments.len(), 2);
        assert!(prompt.arguments[0].required && !prompt.arguments[1].required);
        assert_eq!(
            parsed.document_mime_type(&sha1),
            Some("text/markdown; charset=utf-8")
        );
        assert_eq!(parsed.document_mime_type(&"b".repeat(40)), Some("text/plain"));
        assert_eq!(Capabilities::parse("{}").unwrap().document_mime_type(&sha1), None);
    }

    #[test]
    fn prompts_and_document_types_are_bounded() {
        let long = "x".repeat(5000);
        let many: Vec<String> = (0..65).map(|i| format!(r#"{{"name": "p{i}"}}"#)).collect();
        let arguments: Vec<String> = (0..17).map(|i| format!(r#"{{"name": "a{i}"}}"#)).collect();
        for bad in [
            r#"{"prompts": [{"name": "twice"}, {"name": "twice"}]}"#.to_string(),
            r#"{"prompts": [{"name": "Not A Name"}]}"#.to_string(),
            r#"{"prompts": [{"name": "p", "arguments": [{"name": "a"}, {"name": "a"}]}]}"#.to_string(),
            r#"{"prompts": [{"name": "p", "template": "x"}]}"#.to_string(),
            format!(r#"{{"prompts": [{{"name": "p", "description": "{long}"}}]}}"#),
            format!(r#"{{"prompts": [{}]}}"#, many.join(",")),
            format!(
                r#"{{"prompts": [{{"name": "p", "arguments": [{}]}}]}}"#,
                arguments.join(",")
            ),
            r#"{"documents": {"readme": {"mime_type": "text/plain"}}}"#.to_string(),
            r#"{"documents": {"default": {"mime_type": "plain"}}}"#.to_string(),
            r#"{"documents": {"default": {"mime_type": "text/plain\n"}}}"#.to_string(),
            r#"{"documents": {"default": {}}}"#.to_string(),
        ] {
            assert!(
                Capabilities::parse(&bad).is_err(),
                "{}",
                &bad[..bad.len().min(120)]
            );
        }
    }

    #[test]
    fn allowed_hosts_are_a_scheme_a_host_and_a_port() {
        let parsed = Capabilities::parse(
            r#"{"allowed_hosts": ["https://Feeds.example.org", "http://127.0.0.1:9000"]}"#,
        )
        .unwrap();
        let listed: Vec<String> = parsed.allowed_hosts.iter().map(ToString::to_string).collect();
        assert_eq!(listed, ["https://feeds.example.org:443", "http://127.0.0.1:9000"]);
        for bad in [
            "feeds.example.org",
            "https://*.example.org",
            "https://x.org/path",
            "ftp://x.org",
        ] {
            let text = format!(r#"{{"allowed_hosts": ["{bad}"]}}"#);
            assert!(Capabilities::parse(&text).is_err(), "{bad}");
        }
    }
}
