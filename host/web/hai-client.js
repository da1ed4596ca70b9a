// The HAI client of hai-protocol.md §"Implementation Guide", served by the node.
// Plain browser JavaScript modules: no build step. It keeps its session id in
// localStorage, shows the session's history from the node on load, streams
// answers chunk by chunk as sanitised markdown (hai-markdown.js), shows tool
// calls and approvals as cards (hai-cards.js), and reconnects with
// exponential backoff.
//
// The node hands the connection that creates a session its secret (a `session`
// frame); the page keeps it with the id and shows it when it resumes the session
// or reads its history. An operator token, when the node wants one, comes from
// the page's address (`/?token=…`) and is kept for later visits.
//
// The log follows new content only while the reader is at its end: someone who
// scrolled back to read is not yanked down, they get a "New messages" button.
// An error that says when to try again (`details.retry_after_ms`) gets a retry
// button that stays disabled, counting down, until then.

import { renderMarkdown } from '/hai-markdown.js';
import {
  clearCards, initCards, onApprovalDecision, onApprovalRequest, onRecordedTool, onToolCall, showsCall,
} from '/hai-cards.js';

const SESSION_KEY = 'agora_session_id';
const SECRET_KEY = 'agora_session_secret';
const TOKEN_KEY = 'agora_token';
const BASE_DELAY_MS = 1000;
const MAX_DELAY_MS = 30000;
const MAX_RECONNECT_ATTEMPTS = 8;
const MAX_CONTENT_CHARS = 10000;
/** Answers up to this size are drawn at every chunk; longer ones at most once per frame. */
const DRAW_EVERY_CHUNK_CHARS = 20000;
/** How close to the end of the log still counts as "at the end" (px). */
const AT_END_SLACK_PX = 48;

const $ = (id) => document.getElementById(id);
const log = $('messages');
const wsPath = document.body.dataset.wsPath || '/ws';

let sessionId = getOrCreateSessionId();
let sessionSecret = localStorage.getItem(SECRET_KEY);
const token = getToken();
let ws = null;
let reconnectAttempts = 0;
let reconnectTimer = null;
let lastSent = null; // the last user_message frame, for a retry
const streams = new Map(); // message_id -> {el, text, chunks, pending}

function newId() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

function getOrCreateSessionId() {
  let id = localStorage.getItem(SESSION_KEY);
  if (!id) {
    id = newId();
    localStorage.setItem(SESSION_KEY, id);
    localStorage.removeItem(SECRET_KEY);
  }
  return id;
}

function getToken() {
  const fromAddress = new URLSearchParams(location.search).get('token');
  if (fromAddress) localStorage.setItem(TOKEN_KEY, fromAddress);
  return fromAddress || localStorage.getItem(TOKEN_KEY);
}

function onSession(frame) {
  if (frame.session_id !== sessionId) return;
  sessionSecret = frame.session_secret;
  localStorage.setItem(SECRET_KEY, sessionSecret);
}

// --- Scrolling ---

function atEnd() {
  return log.scrollHeight - log.scrollTop - log.clientHeight <= AT_END_SLACK_PX;
}

function scrollToEnd() {
  log.scrollTop = log.scrollHeight;
  $('new-messages').hidden = true;
}

/** Change the log; follow it if the reader was at its end, else offer to jump there. */
function update(change) {
  const follow = atEnd();
  const result = change();
  if (follow) scrollToEnd();
  else $('new-messages').hidden = false;
  return result;
}

// --- Rendering ---

function addMessage(role, text) {
  const el = document.createElement('div');
  el.className = `msg ${role}`;
  if (role === 'assistant') el.replaceChildren(renderMarkdown(text));
  else el.textContent = text;
  log.append(el);
  return el;
}

function addNotice(kind, text) {
  const el = document.createElement('div');
  el.className = `notice ${kind}`;
  el.textContent = text;
  log.append(el);
  return el;
}

/** Draw a stream's text so far (parsed whole again: see hai-markdown.js). */
function drawStream(stream) {
  stream.pending = false;
  update(() => {
    stream.el.replaceChildren(renderMarkdown(stream.text));
    stream.el.dataset.chunks = String(stream.chunks);
  });
}

function onChunk(frame) {
  let stream = streams.get(frame.message_id);
  if (!stream) {
    const el = update(() => addMessage('assistant', ''));
    el.dataset.messageId = frame.message_id;
    el.classList.add('streaming');
    el.setAttribute('aria-busy', 'true');
    stream = { el, text: '', chunks: 0, pending: false };
    streams.set(frame.message_id, stream);
  }
  stream.text += frame.content;
  stream.chunks += 1;
  if (frame.is_final || stream.text.length <= DRAW_EVERY_CHUNK_CHARS) {
    drawStream(stream);
  } else if (!stream.pending) {
    // Re-parsing a long answer at every chunk would cost its length each time.
    stream.pending = true;
    requestAnimationFrame(() => {
      if (stream.pending) drawStream(stream);
    });
  }
  if (frame.is_final) {
    stream.el.classList.remove('streaming');
    stream.el.removeAttribute('aria-busy');
    stream.el.dataset.final = 'true';
  }
}

const STATUS_TEXT = {
  thinking: 'Assistant is thinking…',
  routing: 'Routing to a specialist…',
  executing_tools: 'Running tools…',
};

function onStatus(frame) {
  const box = $('status');
  if (frame.status === 'completed') {
    box.hidden = true;
    box.dataset.status = 'completed';
    $('send').disabled = false;
    return;
  }
  box.hidden = false;
  box.dataset.status = frame.status;
  $('status-text').textContent = frame.message || STATUS_TEXT[frame.status] || frame.status;
}

const ERROR_TEXT = {
  moderation_violation: 'Your message was blocked. Please rephrase.',
  rate_limit_exceeded: 'Too many requests. Please wait a moment.',
  invalid_json: 'The node could not read a message (invalid JSON).',
};

function onError(frame) {
  const details = frame.details || {};
  $('send').disabled = false;
  // A failed tool's card already says so, with the error.
  if (frame.error_code === 'tool_execution_failed' && showsCall(details.tool_call_id)) return;
  const retryAfter = Number(details.retry_after_ms);
  update(() => {
    const el = addNotice('error', ERROR_TEXT[frame.error_code] || frame.message);
    el.dataset.code = frame.error_code;
    if (Number.isFinite(retryAfter) && retryAfter >= 0 && lastSent) addRetry(el, retryAfter, lastSent);
  });
  if (frame.error_code === 'invalid_session') startNewSession();
}

/** A button that re-sends `frame`, disabled and counting down until `waitMs` has passed. */
function addRetry(notice, waitMs, frame) {
  for (const old of log.querySelectorAll('button.retry:not([data-used])')) {
    old.dataset.used = 'superseded';
    old.disabled = true;
  }
  const readyAt = Date.now() + waitMs;
  const button = document.createElement('button');
  button.type = 'button';
  button.className = 'retry';
  button.dataset.readyAt = String(readyAt);
  const tick = () => {
    if (button.dataset.used) return;
    const left = readyAt - Date.now();
    if (left > 0) {
      button.disabled = true;
      button.textContent = `Retry in ${Math.ceil(left / 1000)} s`;
      setTimeout(tick, Math.min(1000, left % 1000 || 1000));
    } else {
      button.disabled = false;
      button.textContent = 'Retry';
    }
  };
  button.addEventListener('click', () => {
    if (Date.now() < readyAt || !send(frame)) return;
    button.dataset.used = 'sent';
    button.disabled = true;
    button.textContent = 'Sent again';
    lastSent = frame;
    $('send').disabled = true;
  });
  notice.append(' ', button);
  tick();
}

function handleMessage(frame) {
  switch (frame.type) {
    case 'assistant_message_chunk': return onChunk(frame);
    case 'assistant_message':
      return update(() => {
        addMessage('assistant', frame.content).dataset.final = 'true';
      });
    case 'tool_call': return update(() => onToolCall(frame));
    case 'tool_approval_request':
      $('status-text').textContent = 'Waiting for your approval…';
      return update(() => onApprovalRequest(frame));
    case 'status': return onStatus(frame);
    case 'error': return onError(frame);
    case 'session': return onSession(frame);
    default: console.warn('unknown frame type', frame.type);
  }
}

function answerApproval(approvalId, approved, feedback) {
  const frame = { type: 'tool_approval_response', approval_id: approvalId, approved };
  if (feedback) frame.feedback = feedback;
  return send(frame);
}

// --- History (the node keeps it; a reload shows the conversation again) ---

function showEntry(entry) {
  const body = entry.body || {};
  switch (entry.role) {
    case 'user':
      addMessage('user', body.content).dataset.history = 'true';
      break;
    case 'assistant': {
      const el = addMessage('assistant', body.content);
      el.dataset.history = 'true';
      el.dataset.final = 'true';
      break;
    }
    case 'approval_request':
      onApprovalRequest(body);
      break;
    case 'approval':
      onApprovalDecision(body);
      break;
    case 'tool':
      onRecordedTool(body);
      break;
    default:
  }
}

async function loadHistory() {
  log.replaceChildren();
  streams.clear();
  clearCards();
  try {
    const headers = {};
    if (sessionSecret) headers['X-HAI-Session-Secret'] = sessionSecret;
    if (token) headers.Authorization = `Bearer ${token}`;
    const reply = await fetch(`${wsPath}/sessions/${encodeURIComponent(sessionId)}/history`, { headers });
    if (!reply.ok) throw new Error(`HTTP ${reply.status}`);
    const { entries } = await reply.json();
    for (const entry of entries) showEntry(entry);
    document.body.dataset.history = String(entries.length);
  } catch (error) {
    console.error('history not loaded', error);
    addNotice('error', 'The conversation history could not be loaded.');
  }
  scrollToEnd();
}

// --- Connection ---

function setConnection(state, text) {
  $('connection').dataset.state = state;
  $('connection-text').textContent = text;
}

function socketUrl() {
  const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
  const query = new URLSearchParams({ session_id: sessionId });
  if (sessionSecret) query.set('session_secret', sessionSecret);
  if (token) query.set('token', token);
  return `${scheme}://${location.host}${wsPath}?${query}`;
}

function connect() {
  clearTimeout(reconnectTimer);
  setConnection('connecting', reconnectAttempts ? `Reconnecting (attempt ${reconnectAttempts})…` : 'Connecting…');
  const socket = new WebSocket(socketUrl());
  ws = socket;
  socket.onopen = () => {
    reconnectAttempts = 0;
    setConnection('connected', 'Connected');
    // A turn's end may have been sent while we were away: never leave Send stuck.
    $('send').disabled = false;
    $('status').hidden = true;
  };
  socket.onmessage = (event) => {
    let frame;
    try {
      frame = JSON.parse(event.data);
    } catch (error) {
      console.error('Failed to parse message:', error);
      return;
    }
    handleMessage(frame);
  };
  socket.onerror = (error) => console.error('WebSocket error:', error);
  socket.onclose = () => {
    if (ws !== socket) return; // replaced on purpose (new session)
    attemptReconnection();
  };
}

function attemptReconnection() {
  if (reconnectAttempts >= MAX_RECONNECT_ATTEMPTS) {
    setConnection('offline', 'Offline. Refresh the page to try again.');
    return;
  }
  const delay = Math.min(BASE_DELAY_MS * 2 ** reconnectAttempts, MAX_DELAY_MS);
  reconnectAttempts += 1;
  setConnection('reconnecting', `Connection lost. Retrying in ${Math.round(delay / 1000)} s…`);
  reconnectTimer = setTimeout(async () => {
    await loadHistory(); // catch up on what happened while away
    connect();
  }, delay);
}

function send(frame) {
  if (!ws || ws.readyState !== WebSocket.OPEN) {
    update(() => addNotice('error', 'Not connected. Retrying…'));
    return false;
  }
  ws.send(JSON.stringify(frame));
  return true;
}

async function startNewSession() {
  sessionId = newId();
  sessionSecret = null;
  lastSent = null;
  localStorage.setItem(SESSION_KEY, sessionId);
  localStorage.removeItem(SECRET_KEY);
  $('session-id').textContent = sessionId;
  const old = ws;
  ws = null;
  if (old) old.close();
  reconnectAttempts = 0;
  await loadHistory();
  connect();
}

// --- Wiring ---

function submit(event) {
  event.preventDefault();
  const content = $('input').value.trim();
  if (!content) return;
  if (content.length > MAX_CONTENT_CHARS) {
    update(() => addNotice('error', `Messages are limited to ${MAX_CONTENT_CHARS} characters.`));
    return;
  }
  const frame = { type: 'user_message', content, session_id: sessionId, metadata: {} };
  if (send(frame)) {
    lastSent = frame;
    addMessage('user', content);
    scrollToEnd(); // what you just said is where you are
    $('input').value = '';
    $('send').disabled = true;
  }
}

initCards(log, answerApproval);
$('composer').addEventListener('submit', submit);
$('input').addEventListener('keydown', (event) => {
  if (event.key === 'Enter' && !event.shiftKey) submit(event);
});
$('new-session').addEventListener('click', startNewSession);
$('new-messages').addEventListener('click', () => {
  scrollToEnd();
  log.focus({ preventScroll: true });
});
log.addEventListener('scroll', () => {
  if (atEnd()) $('new-messages').hidden = true;
});
$('session-id').textContent = sessionId;

loadHistory().then(connect);
