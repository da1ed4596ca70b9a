//! The node's last warnings and errors, kept in memory for the operator's
//! console: a `tracing` layer beside the log writer, so what the console
//! shows is what the log says, not a second account of it.
//!
//! Bounded twice: at most [`CAPACITY`] entries (the oldest go first), each
//! message and field value cut at [`MAX_TEXT_CHARS`]. Their text is untrusted
//! (a model's error, a plugin's output, a client's value) and is kept with its
//! control characters escaped as the human log writes them; the page shows it
//! as text, never as markup.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::{self, Write as _};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use serde::Serialize;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;

use super::EscapeControls;

/// The most entries kept.
pub const CAPACITY: usize = 500;
/// The most characters kept of a message or a field's value.
pub const MAX_TEXT_CHARS: usize = 2_000;
/// The most fields kept of one event.
const MAX_FIELDS: usize = 24;

/// One warning or error as the console lists it.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    /// Its place in the node's log since start: the console asks for what is newer.
    pub seq: u64,
    pub at_ms: u64,
    pub level: &'static str,
    pub target: String,
    pub message: String,
    pub fields: BTreeMap<String, String>,
}

/// The ring of recent entries (see the module docs).
#[derive(Default)]
pub struct RecentLog {
    entries: Mutex<VecDeque<Entry>>,
    written: AtomicU64,
}

impl RecentLog {
    /// The entries kept, oldest first.
    pub fn entries(&self) -> Vec<Entry> {
        self.entries.lock().iter().cloned().collect()
    }

    /// How many entries were ever written: changes whenever one is.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    fn push(&self, mut entry: Entry) {
        let mut entries = self.entries.lock();
        entry.seq = self.written.fetch_add(1, Ordering::Relaxed) + 1;
        if entries.len() == CAPACITY {
            entries.pop_front();
        }
        entries.push_back(entry);
    }
}

/// The process's ring, which [`RecentLayer`] writes and the console reads.
pub fn recent() -> &'static RecentLog {
    static RECENT: OnceLock<RecentLog> = OnceLock::new();
    RECENT.get_or_init(RecentLog::default)
}

/// The layer that keeps every warning and error in [`recent`].
pub struct RecentLayer;

impl<S: Subscriber> Layer<S> for RecentLayer {
    fn on_event(&self, event: &Event<'_>, _context: Context<'_, S>) {
        let level = *event.metadata().level();
        if level > Level::WARN {
            return;
        }
        let mut visitor = Collect::default();
        event.record(&mut visitor);
        recent().push(Entry {
            seq: 0,
            at_ms: crate::vocab::now_ms(),
            level: if level == Level::ERROR { "ERROR" } else { "WARN" },
            target: event.metadata().target().to_string(),
            message: visitor.message,
            fields: visitor.fields,
        });
    }
}

#[derive(Default)]
struct Collect {
    message: String,
    fields: BTreeMap<String, String>,
}

impl Visit for Collect {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.keep(field, format_args!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.keep(field, format_args!("{value}"));
    }
}

impl Collect {
    fn keep(&mut self, field: &Field, value: fmt::Arguments<'_>) {
        let text = bounded_escaped(value);
        if field.name() == "message" {
            self.message = text;
        } else if self.fields.len() < MAX_FIELDS {
            self.fields.insert(field.name().to_string(), text);
        }
    }
}

/// `value` written with its control characters escaped, cut at [`MAX_TEXT_CHARS`].
fn bounded_escaped(value: fmt::Arguments<'_>) -> String {
    let mut bounded = Bounded {
        text: String::new(),
        room: MAX_TEXT_CHARS,
    };
    // An `Err` is the bound reached: what fits is kept.
    let _ = EscapeControls { inner: &mut bounded }.write_fmt(value);
    bounded.text
}

/// A `String` that takes at most `room` more characters, then refuses.
struct Bounded {
    text: String,
    room: usize,
}

impl fmt::Write for Bounded {
    fn write_str(&mut self, part: &str) -> fmt::Result {
        for c in part.chars() {
            if self.room == 0 {
                self.text.push('…');
                return Err(fmt::Error);
            }
            self.text.push(c);
            self.room -= 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    #[test]
    fn warnings_and_errors_are_kept_escaped_bounded_and_in_order() {
        let subscriber = tracing_subscriber::registry().with(RecentLayer);
        let before = recent().written();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("not kept");
            tracing::warn!(peer = "a\nb", "forged\nline");
            tracing::error!(huge = %"x".repeat(MAX_TEXT_CHARS + 10), "too long");
        });
        let mine: Vec<Entry> = recent()
            .entries()
            .into_iter()
            .filter(|entry| entry.seq > before && entry.target.ends_with("recent::tests"))
            .collect();
        assert_eq!(mine.len(), 2, "{mine:?}");
        assert_eq!(
            (mine[0].level, mine[0].message.as_str()),
            ("WARN", "forged\\nline")
        );
        assert_eq!(mine[0].fields["peer"], "a\\nb");
        assert_eq!(mine[1].level, "ERROR");
        assert_eq!(mine[1].fields["huge"].chars().count(), MAX_TEXT_CHARS + 1);
        assert!(mine[0].seq < mine[1].seq);
    }

    #[test]
    fn the_ring_keeps_the_newest() {
        let ring = RecentLog::default();
        for n in 0..CAPACITY + 3 {
            ring.push(Entry {
                seq: 0,
                at_ms: 0,
                level: "WARN",
                target: String::new(),
                message: n.to_string(),
                fields: BTreeMap::new(),
            });
        }
        let entries = ring.entries();
        assert_eq!(entries.len(), CAPACITY);
        assert_eq!(entries[0].message, "3");
        assert_eq!(ring.written(), CAPACITY as u64 + 3);
    }
}
