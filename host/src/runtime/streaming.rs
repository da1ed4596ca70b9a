//! A plugin call whose events reach its transport while it runs: HAI's
//! frames, A2A's task updates, an arena's live events.
//!
//! Every such transport needs the same loop — run the call, hand each event
//! to the transport as it comes, stop at a deadline if there is one, then
//! hand over what was emitted before the end — and the details of that loop
//! are where copies drift apart: which side wins when both are ready (events
//! first, so a frame is never reordered behind the reply), and that the
//! events left in the channel after the call are not lost. So it is written
//! once, here, and a transport supplies only its [`EventSink`].

use std::future::Future;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{Call, CallEvent, Exchange, InvokeError, LoadedPlugin, Runtime};

/// What a transport does with each event of one call.
pub trait EventSink: Send {
    fn on_event(&mut self, event: CallEvent) -> impl Future<Output = ()> + Send;
}

/// The receiving end of one call's events, made with [`event_channel`].
pub struct EventStream(mpsc::Receiver<CallEvent>);

/// The channel one call's events travel in: the sender goes into the call's
/// [`Exchange`] (and to whatever else reports on the call, e.g. its approver),
/// the stream to [`Runtime::invoke_streaming`]. `buffer` bounds what a
/// plugin may emit ahead of its transport.
pub fn event_channel(buffer: usize) -> (mpsc::Sender<CallEvent>, EventStream) {
    let (sender, receiver) = mpsc::channel(buffer);
    (sender, EventStream(receiver))
}

impl Runtime {
    /// [`Runtime::invoke`], with the call's events handed to `sink` as they
    /// come. At `deadline` the call is dropped (its store with it: the wasm
    /// stops at its next epoch tick) and the answer is [`InvokeError::Timeout`].
    pub async fn invoke_streaming(
        &self,
        plugin: &Arc<LoadedPlugin>,
        call: Call,
        exchange: Exchange,
        events: EventStream,
        sink: &mut impl EventSink,
        deadline: Option<Instant>,
    ) -> Result<String, InvokeError> {
        let EventStream(mut stream) = events;
        let mut invoke = Box::pin(self.invoke(plugin, call, exchange));
        let past_deadline = async {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(past_deadline);
        let outcome = loop {
            tokio::select! {
                biased;
                Some(event) = stream.recv() => sink.on_event(event).await,
                outcome = &mut invoke => break outcome,
                () = &mut past_deadline => break Err(InvokeError::Timeout),
            }
        };
        drop(invoke);
        while let Ok(event) = stream.try_recv() {
            sink.on_event(event).await;
        }
        outcome
    }
}
