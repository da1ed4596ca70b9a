//! `GET {path}/api/events`: the page's one live stream (server-sent events),
//! so the page never polls a widget. At connect it sends one event of each
//! kind, then one whenever that part changes; each event's data is exactly
//! what the matching `GET {path}/api/<kind>` answers:
//! - `approvals` (and `overview`, which counts them) the moment the table
//!   changes: the runtime's approvals say so ([`crate::runtime::Approvals::changes`]);
//! - `plugins` (and `overview`) the moment the registry changes, and each
//!   second its call counts moved;
//! - `log` each second new warnings or errors were written;
//! - `activity` every fifteen seconds, when it changed;
//! - `series` each five seconds, when a new point is whole, and `fleet` (the
//!   nodes' heartbeats come as often) when it changed.
//!
//! A stream is its response's own, no task beside it: it looks at the node
//! only when the page has read what was due, and ends with the response. At
//! most [`MAX_STREAMS`] are open at once (a console has few operators); one
//! more is refused with 503 rather than queued.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use super::{ConsoleError, activity, approvals, fleet, log, overview, plugins};
use crate::metrics::recent::SLOT_MS;
use crate::node::state::NodeState;

/// The most console streams open at once.
pub const MAX_STREAMS: usize = 16;
/// How often the parts without a change signal of their own are looked at.
const LOOK_EVERY: Duration = Duration::from_secs(1);
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// `activity` is looked at every this many series points.
const ACTIVITY_EVERY_SLOTS: u64 = 3;

/// The places for open streams, shared by the console's routes.
#[derive(Clone)]
pub struct Streams(Arc<Semaphore>);

impl Default for Streams {
    fn default() -> Self {
        Streams(Arc::new(Semaphore::new(MAX_STREAMS)))
    }
}

pub async fn events(
    State(node): State<NodeState>,
    Extension(streams): Extension<Streams>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ConsoleError> {
    let place = streams.0.try_acquire_owned().map_err(|_| {
        ConsoleError::Unavailable(format!(
            "{MAX_STREAMS} console streams are open already; close one (another tab?) and reload"
        ))
    })?;
    let follower = Follower {
        approvals_changed: node.runtime.approvals().changes(),
        registry_changed: node.runtime.registry_changes(),
        look: tokio::time::interval(LOOK_EVERY),
        sender: Sender::default(),
        log_written: None,
        series_slot: None,
        node,
        _place: place,
    };
    // The stream is the response's own: it runs while the page reads it and
    // ends, its place given back, when the page goes.
    let stream = futures::stream::unfold(follower, |mut follower| async move {
        let event = follower.next().await;
        Some((Ok(event), follower))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)))
}

/// What a stream last sent of each kind, so an unchanged part is not sent
/// again, and what it has to send next.
#[derive(Default)]
struct Sender {
    sent: HashMap<&'static str, String>,
    queued: VecDeque<Event>,
}

impl Sender {
    /// Queue `data` as a `kind` event unless it is what was sent last.
    fn send(&mut self, kind: &'static str, data: Value) {
        let text = data.to_string();
        if self.sent.get(kind) == Some(&text) {
            return;
        }
        self.queued.push_back(Event::default().event(kind).data(&text));
        self.sent.insert(kind, text);
    }
}

/// One page's stream: the change signals it waits on and what it sent.
struct Follower {
    node: NodeState,
    approvals_changed: watch::Receiver<u64>,
    registry_changed: watch::Receiver<u64>,
    look: tokio::time::Interval,
    sender: Sender,
    log_written: Option<u64>,
    series_slot: Option<u64>,
    _place: OwnedSemaphorePermit,
}

impl Follower {
    /// The next event, once one is due.
    async fn next(&mut self) -> Event {
        loop {
            if let Some(event) = self.sender.queued.pop_front() {
                return event;
            }
            let node = &self.node;
            tokio::select! {
                // An `Err`: the runtime is gone, the node stopping; the page's read ends with it.
                changed = self.approvals_changed.changed() => {
                    if changed.is_err() {
                        std::future::pending::<()>().await;
                    }
                    self.sender.send("approvals", approvals::list_of(node));
                    self.sender.send("overview", overview::overview_of(node).await);
                }
                changed = self.registry_changed.changed() => {
                    if changed.is_err() {
                        std::future::pending::<()>().await;
                    }
                    self.sender.send("plugins", plugins::list_of(node).await);
                    self.sender.send("overview", overview::overview_of(node).await);
                }
                _ = self.look.tick() => {
                    look_again(node, &mut self.sender, &mut self.log_written, &mut self.series_slot).await;
                }
            }
        }
    }
}

/// The parts without a change signal: each sent when it differs from the last sent.
async fn look_again(
    node: &NodeState,
    sender: &mut Sender,
    log_written: &mut Option<u64>,
    series_slot: &mut Option<u64>,
) {
    let first = series_slot.is_none();
    let slot = crate::vocab::now_ms() / SLOT_MS;
    if *series_slot != Some(slot) {
        *series_slot = Some(slot);
        // The overview's uptime moves every look; it is sent with each new point, not each second.
        sender.send("series", overview::series_of(node));
        sender.send("overview", overview::overview_of(node).await);
        // Heartbeats come each five seconds too; a store that does not answer is the overview's to show.
        if let Ok(fleet) = fleet::fleet_of(node).await {
            sender.send("fleet", fleet);
        }
        // It reads up to four times `activity::SCAN` records: every third point is often enough.
        // A store that does not answer now is shown by the overview; the next look tries again.
        if (first || slot.is_multiple_of(ACTIVITY_EVERY_SLOTS))
            && let Ok(activity) = activity::activity_of(node).await
        {
            sender.send("activity", activity);
        }
    }
    if first {
        sender.send("approvals", approvals::list_of(node));
    }
    sender.send("plugins", plugins::list_of(node).await);
    let written = crate::logging::recent::recent().written();
    if *log_written != Some(written) {
        *log_written = Some(written);
        sender.send("log", log::list_of());
    }
}
