//! One WebSocket connection: bounded buffers, keep-alive, frame size, the
//! moderation hook, and the frames a client sends, taken one at a time.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use futures::{SinkExt, StreamExt};
use serde_json::json;
use tokio::sync::mpsc;

use super::session::{Attached, Opened, Origin, Session};
use super::wire::{ApprovalResponse, Inbound, Outbound, UserMessage};
use super::{HaiError, HaiState, access, fleet, turn, wire};
use crate::runtime::approval::{Answer, AnswerError, Answerer, WaitingApproval};
use crate::store::{Collection, now_ms};

/// How long one write to a client may take before the client counts as gone.
pub(super) const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Initial read buffer of a connection (see `upgrade`).
pub(super) const READ_BUFFER_BYTES: usize = 4 << 10;
/// Close codes (RFC 6455 §7.4.1).
pub(super) const CLOSE_POLICY: u16 = 1008;
pub(super) const CLOSE_TOO_BIG: u16 = 1009;
pub(super) const CLOSE_GOING_AWAY: u16 = 1001;

impl HaiState {
    /// The moderation hook: refuse a message naming a blocked word or phrase
    /// (case-insensitive, whole words) before the assistant sees it.
    pub(super) fn moderate(&self, content: &str) -> Result<(), HaiError> {
        let words = |text: &str| -> String {
            text.split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .map(str::to_lowercase)
                .collect::<Vec<_>>()
                .join(" ")
        };
        let normalised = format!(" {} ", words(content));
        for blocked in &self.node.config.hai.blocked_words {
            let pattern = words(blocked);
            if !pattern.is_empty() && normalised.contains(&format!(" {pattern} ")) {
                return Err(HaiError::Moderation {
                    word: blocked.clone(),
                });
            }
        }
        Ok(())
    }
}

pub(super) async fn upgrade(
    State(shared): State<HaiState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    let config = &shared.node.config.hai;
    // Before the upgrade (the browser policy has run): a missing token never gets a socket.
    let checked = access::check_token(
        &config.auth_token,
        query.get(access::TOKEN_PARAM).map(String::as_str),
        &headers,
    );
    if let Err(error) = checked {
        error.log("upgrade");
        return error.to_http();
    }
    let initial = query.get("session_id").cloned();
    if let Some(id) = &initial
        && let Err(error) = wire::check_session_id(id)
    {
        return error.to_http();
    }
    let secret = access::presented_secret(query.get(access::SECRET_PARAM).map(String::as_str), &headers)
        .map(str::to_string);
    let max_frame = shared.node.config.hai.max_frame_bytes;
    ws.max_message_size(max_frame)
        .max_frame_size(max_frame)
        // tungstenite allocates its read buffer up front (128 KiB by default), per
        // connection; client frames are small and the buffer grows for a big one.
        .read_buffer_size(READ_BUFFER_BYTES)
        // Outbound frames are bounded (chunks by the plugin event limit, replies by the turn);
        // the write buffer never needs to hold more than a few of them.
        .max_write_buffer_size(8 << 20)
        .on_upgrade(move |socket| connection(socket, shared, peer, initial, secret))
}

/// What the reader hands the writer.
pub(super) enum Out {
    Frame(String),
    /// Start forwarding a session's frames.
    Subscribe(mpsc::Receiver<Arc<str>>),
    Close(u16, &'static str),
}

pub(super) struct Connection {
    shared: HaiState,
    direct: mpsc::Sender<Out>,
    session: Option<Attached>,
    /// Its client address and pending approvals, for the per-address and per-connection bounds.
    origin: Origin,
    /// The session secret presented when it connected.
    secret: Option<String>,
}

impl Connection {
    /// Queue a frame for this connection only. A client that let its queue fill
    /// is not reading: it is disconnected rather than buffered for.
    pub(super) fn send_direct(&self, out: Out) -> bool {
        self.direct.try_send(out).is_ok()
    }

    pub(super) fn reply_error(&self, error: &HaiError) -> bool {
        error.log("message");
        self.send_direct(Out::Frame(error.to_frame().to_text()))
    }

    pub(super) async fn bind(
        &mut self,
        session_id: &str,
        secret: Option<&str>,
    ) -> Result<Arc<Session>, HaiError> {
        if let Some(session) = &self.session {
            if session.id != session_id {
                // Not naming it: the message is also logged, and an id may be a bearer secret.
                return Err(HaiError::InvalidSession(
                    "this connection belongs to another session; open another connection for another session"
                        .into(),
                ));
            }
            return Ok(Arc::clone(session));
        }
        let secret = secret.or(self.secret.as_deref());
        let shared = &self.shared;
        // Read before the hub's lock is taken (a store may wait on the network);
        // if the session came alive meanwhile, the hub uses the live one instead.
        let stored = match shared.hub.live(session_id) {
            Some(_) => None,
            None => Some(shared.stored_session(session_id).await?),
        };
        let opened = shared.hub.open(session_id, secret, self.origin.ip, || {
            stored.ok_or_else(|| HaiError::Internal("the session ended while it was being opened".into()))
        })?;
        let session = match opened {
            Opened::Existing(session) => session,
            Opened::Created(session, secret) => {
                // In a fleet the id is claimed for every node before its secret is
                // handed out, so another node opens it with this secret only (on one
                // node the hub's table is the claim, and the record waits for a message).
                if shared.hub.fleet().is_some() {
                    shared.record_session(&session, self.origin.ip).await?;
                }
                // Queued before the subscription, so it is this connection's first frame of the session.
                let frame = Outbound::Session {
                    session_id: session.id.clone(),
                    session_secret: secret,
                };
                if !self.send_direct(Out::Frame(frame.to_text())) {
                    return Err(HaiError::Overloaded);
                }
                session
            }
        };
        if !self.send_direct(Out::Subscribe(session.subscribe())) {
            return Err(HaiError::Overloaded);
        }
        self.session = Some(session.attach());
        Ok(session)
    }

    /// Handle one text frame. `false` when the connection must close.
    pub(super) async fn on_text(&mut self, text: &str) -> bool {
        let outcome = match wire::parse(text) {
            Ok(Inbound::UserMessage(message)) => self.on_user_message(message).await,
            Ok(Inbound::ApprovalResponse(response)) => self.on_approval(response).await,
            Err(error) => Err(error),
        };
        match outcome {
            Ok(()) => true,
            Err(error) => self.reply_error(&error),
        }
    }

    pub(super) async fn on_user_message(&mut self, message: UserMessage) -> Result<(), HaiError> {
        let session = self
            .bind(&message.session_id, message.session_secret.as_deref())
            .await?;
        self.shared.hub.admit_message(&session)?;
        self.shared.moderate(&message.content)?;
        let queued = session.enqueue()?;
        let turn = turn::run(self.shared.clone(), session, self.origin.clone(), message, queued);
        self.shared.node.background.spawn("hai.turn", turn);
        Ok(())
    }

    /// Only a connection bound to the session (its creator, or one that showed the
    /// secret or the session's bearer id) can answer its approvals, on whichever
    /// node it is connected (see [`HaiState::answer_approval`]).
    pub(super) async fn on_approval(&mut self, response: ApprovalResponse) -> Result<(), HaiError> {
        let Some(session) = self.session.as_deref().cloned() else {
            return Err(HaiError::UnknownApproval(response.approval_id));
        };
        self.shared.answer_approval(&session, response).await
    }
}

impl HaiState {
    /// Decide an approval of `session`: the one answer path, whether a
    /// connection of the session sent the answer or the operator's console did.
    /// The answer that takes the approval's record decides it; any other (a
    /// second answer, one racing it on another node, one after the tool's
    /// deadline) is told it is unknown. The decision is on disk before the tool
    /// may run, since the frames that follow tell every client it was taken.
    pub(super) async fn answer_approval(
        &self,
        session: &Session,
        response: ApprovalResponse,
    ) -> Result<(), HaiError> {
        let key = fleet::approval_key(&session.id, &response.approval_id);
        let Some(record) = self
            .node
            .store
            .take::<fleet::ApprovalRecord>(Collection::Approvals, &key)
            .await?
        else {
            return Err(HaiError::UnknownApproval(response.approval_id));
        };
        // The waiting tool, when it waits on this node. Held until the decision is
        // recorded: not recorded, not acted on, and dropping it ends the wait as unanswered.
        let local = self
            .node
            .runtime
            .approvals()
            .take(&session.approval_scope(), &response.approval_id);
        let entry = json!({
            "approval_id": response.approval_id,
            "tool_name": record.tool_name,
            "approved": response.approved,
            "feedback": response.feedback,
        });
        self.append(session, "approval", entry).await?;
        self.commit().await?;
        let decided = fleet::Decided {
            session_id: session.id.clone(),
            approval_id: response.approval_id,
            approved: response.approved,
            feedback: response.feedback,
        };
        let delivered = match (local, self.hub.fleet()) {
            (Some(decision), _) => decision.deliver(decided.outcome()),
            // It waits on another node, which takes it from here.
            (None, Some(fleet)) => {
                fleet.send_decision(&decided).await?;
                true
            }
            (None, None) => false,
        };
        if !delivered {
            // The tool stopped waiting meanwhile (its turn ended).
            return Err(HaiError::UnknownApproval(decided.approval_id));
        }
        Ok(())
    }
}

/// The console's answer to a HAI approval is a `tool_approval_response` of the
/// session, decided by [`HaiState::answer_approval`] as a connection's is.
#[async_trait::async_trait]
impl Answerer for HaiState {
    async fn answer(&self, waiting: &WaitingApproval, answer: Answer) -> Result<(), AnswerError> {
        let (_, session_id) = waiting.scope_parts();
        let Some(session) = self.hub.live(session_id) else {
            return Err(AnswerError::lost(waiting, "its session ended"));
        };
        let response = ApprovalResponse {
            approval_id: waiting.asked.approval_id.clone(),
            approved: answer.approved,
            feedback: wire::given_feedback(answer.feedback),
        };
        match self.answer_approval(&session, response).await {
            Ok(()) => Ok(()),
            Err(HaiError::UnknownApproval(_)) => Err(AnswerError::lost(
                waiting,
                "a client of the session answered it, or it timed out",
            )),
            Err(error) => Err(AnswerError::Failed(error.to_string())),
        }
    }
}

pub(super) async fn connection(
    socket: WebSocket,
    shared: HaiState,
    peer: SocketAddr,
    initial_session: Option<String>,
    secret: Option<String>,
) {
    let config = shared.node.config.hai.clone();
    let (sink, mut stream) = socket.split();
    let (direct, outbox) = mpsc::channel(config.send_buffer_frames);
    let last_heard = Arc::new(AtomicU64::new(now_ms()));
    let mut writer = tokio::spawn(write_loop(
        sink,
        outbox,
        last_heard.clone(),
        Duration::from_secs(config.ping_interval_secs),
    ));
    let mut connection = Connection {
        shared,
        direct,
        session: None,
        origin: Origin::new(peer.ip()),
        secret,
    };
    if let Some(id) = initial_session
        && let Err(error) = connection.bind(&id, None).await
    {
        connection.reply_error(&error);
    }
    loop {
        let message = tokio::select! {
            message = stream.next() => message,
            _ = &mut writer => return,
        };
        last_heard.store(now_ms(), Ordering::Relaxed);
        let keep_open = match message {
            Some(Ok(Message::Text(text))) => connection.on_text(text.as_str()).await,
            Some(Ok(Message::Binary(_))) => connection.reply_error(&HaiError::InvalidMessage(
                "frames are JSON text; binary frames are not part of the protocol".into(),
            )),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => true,
            Some(Ok(Message::Close(_))) | None => break,
            Some(Err(error)) => {
                let text = error.to_string();
                let too_big = text.contains("too long") || text.contains("too big");
                tracing::debug!(transport = "hai", %text, "connection read failed");
                if too_big {
                    connection.send_direct(Out::Close(CLOSE_TOO_BIG, "message too big"));
                }
                break;
            }
        };
        if !keep_open {
            // Its queue is full: the writer is stuck on this client; dropping the sender ends it.
            tracing::info!(
                transport = "hai",
                "closing a connection that does not read its frames"
            );
            break;
        }
    }
    drop(connection);
    let _ = tokio::time::timeout(WRITE_TIMEOUT, writer).await;
}

pub(super) async fn write_loop(
    mut sink: futures::stream::SplitSink<WebSocket, Message>,
    mut outbox: mpsc::Receiver<Out>,
    last_heard: Arc<AtomicU64>,
    ping_every: Duration,
) {
    let mut frames: Option<mpsc::Receiver<Arc<str>>> = None;
    let mut ping = tokio::time::interval(ping_every);
    ping.tick().await;
    let close = |code: u16, reason: &'static str| {
        Message::Close(Some(CloseFrame {
            code,
            reason: Utf8Bytes::from_static(reason),
        }))
    };
    loop {
        let message = tokio::select! {
            out = outbox.recv() => match out {
                Some(Out::Frame(text)) => Message::Text(text.into()),
                Some(Out::Subscribe(receiver)) => {
                    frames = Some(receiver);
                    continue;
                }
                Some(Out::Close(code, reason)) => {
                    let _ = tokio::time::timeout(WRITE_TIMEOUT, sink.send(close(code, reason))).await;
                    return;
                }
                None => {
                    let _ = tokio::time::timeout(WRITE_TIMEOUT, sink.close()).await;
                    return;
                }
            },
            frame = next_frame(&mut frames) => match frame {
                Some(text) => Message::Text(text.as_ref().into()),
                // The session let go of this connection's queue: it fell too far behind.
                None => {
                    tracing::info!(transport = "hai", "client too slow for its session's frames; disconnecting");
                    let _ = tokio::time::timeout(WRITE_TIMEOUT, sink.send(close(CLOSE_POLICY, "too slow: reconnect and read the history"))).await;
                    return;
                }
            },
            _ = ping.tick() => {
                let silent_ms = now_ms().saturating_sub(last_heard.load(Ordering::Relaxed));
                if silent_ms > 2 * ping_every.as_millis() as u64 {
                    tracing::debug!(transport = "hai", silent_ms, "peer stopped answering pings");
                    let _ = tokio::time::timeout(WRITE_TIMEOUT, sink.send(close(CLOSE_GOING_AWAY, "keep-alive timed out"))).await;
                    return;
                }
                Message::Ping(Default::default())
            }
        };
        match tokio::time::timeout(WRITE_TIMEOUT, sink.send(message)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return,
            Err(_) => {
                tracing::info!(
                    transport = "hai",
                    "closing a connection that does not read its frames (write timed out)"
                );
                return;
            }
        }
    }
}

pub(super) async fn next_frame(frames: &mut Option<mpsc::Receiver<Arc<str>>>) -> Option<Arc<str>> {
    match frames {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}
