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
//! - `series` each five seconds, when a new point is whole.
//!
//! A stream holds a task and a channel of a few events; at most
//! [`MAX_STREAMS`] are open at once (a console has few operators), and one
//! more is refused with 503 rather than queued.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use serde_json::Value;
use tokio::sync::{Semaphore, mpsc};

use super::{ConsoleError, activity, approvals, log, overview, plugins};
use crate::metrics::recent::SLOT_MS;
use crate::node::state::NodeState;

/// The most console streams open at once.
pub const MAX_STREAMS: usize = 16;
/// How often the parts without a change signal of their own are looked at.
const LOOK_EVERY: Duration = Duration::from_secs(1);
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Events a stream may have queued for a slow reader; the task waits beyond it.
const QUEUED_EVENTS: usize = 8;
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
    let (sender, receiver) = mpsc::channel(QUEUED_EVENTS);
    let background = node.background.clone();
    background.spawn("console.events", async move {
        let _place = place;
        follow(node, sender).await;
    });
    let stream = futures::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|event| (event, receiver))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)))
}

/// What a stream last sent of each kind, so an unchanged part is not sent again.
struct Sender {
    channel: mpsc::Sender<Result<Event, Infallible>>,
    sent: HashMap<&'static str, String>,
}

impl Sender {
    /// Send `data` as a `kind` event unless it is what was sent last; `false`: the reader left.
    async fn send(&mut self, kind: &'static str, data: Value) -> bool {
        let text = data.to_string();
        if self.sent.get(kind) == Some(&text) {
            return true;
        }
        let event = Event::default().event(kind).data(&text);
        self.sent.insert(kind, text);
        self.channel.send(Ok(event)).await.is_ok()
    }
}

async fn follow(node: NodeState, channel: mpsc::Sender<Result<Event, Infallible>>) {
    let mut approvals_changed = node.runtime.approvals().changes();
    let mut registry_changed = node.runtime.registry_changes();
    let mut sender = Sender {
        channel,
        sent: HashMap::new(),
    };
    let mut look = tokio::time::interval(LOOK_EVERY);
    let mut log_written = None;
    let mut series_slot = None;
    loop {
        let go_on = tokio::select! {
            // An `Err`: the runtime is gone, the node stopping.
            changed = approvals_changed.changed() => {
                changed.is_ok()
                    && sender.send("approvals", approvals::list_of(&node)).await
                    && sender.send("overview", overview::overview_of(&node).await).await
            }
            changed = registry_changed.changed() => {
                changed.is_ok()
                    && sender.send("plugins", plugins::list_of(&node).await).await
                    && sender.send("overview", overview::overview_of(&node).await).await
            }
            _ = look.tick() => look_again(&node, &mut sender, &mut log_written, &mut series_slot).await,
            () = sender.channel.closed() => false,
        };
        if !go_on {
            return;
        }
    }
}

/// The parts without a change signal: each sent when it differs from the last sent.
async fn look_again(
    node: &NodeState,
    sender: &mut Sender,
    log_written: &mut Option<u64>,
    series_slot: &mut Option<u64>,
) -> bool {
    let first = series_slot.is_none();
    let slot = crate::vocab::now_ms() / SLOT_MS;
    if *series_slot != Some(slot) {
        *series_slot = Some(slot);
        // The overview's uptime moves every look; it is sent with each new point, not each second.
        if !sender.send("series", overview::series_of(node)).await
            || !sender.send("overview", overview::overview_of(node).await).await
        {
            return false;
        }
        // It reads up to four times `activity::SCAN` records: every third point is often enough.
        // A store that does not answer now is shown by the overview; the next look tries again.
        if (first || slot.is_multiple_of(ACTIVITY_EVERY_SLOTS))
            && let Ok(activity) = activity::activity_of(node).await
            && !sender.send("activity", activity).await
        {
            return false;
        }
    }
    if first && !sender.send("approvals", approvals::list_of(node)).await {
        return false;
    }
    if !sender.send("plugins", plugins::list_of(node).await).await {
        return false;
    }
    let written = crate::logging::recent::recent().written();
    if *log_written != Some(written) {
        *log_written = Some(written);
        if !sender.send("log", log::list_of()).await {
            return false;
        }
    }
    true
}
