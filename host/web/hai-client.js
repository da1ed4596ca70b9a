// The HAI client of hai-protocol.md §"Implementation Guide", served by the node.
// Plain browser JavaScript: no build step. It keeps its session id in
// localStorage, shows the session's history from the node on load, streams
// answers chunk by chunk, shows tool activity, asks for approvals in a modal,
// and reconnects with exponential backoff.
//
// The node hands the connection that creates a session its secret (a `session`
// frame); the page keeps it with the id and shows it when it resumes the session
// or reads its history. An operator token, when the node wants one, comes from
// the page's address (`/?token=…`) and is kept for later visits.

const SESSION_KEY = 'agora_session_id';
const SECRET_KEY = 'agora_session_secret';
const TOKEN_KEY = 'agora_token';
const BASE_DELAY_MS = 1000;
const MAX_DELAY_MS = 30000;
const MAX_RECONNECT_ATTEMPTS = 8;
const MAX_CONTENT_CHARS = 10000;

const $ = (id) => document.getElementById(id);
const wsPath = document.body.dataset.wsPath || '/ws';

let sessionId = getOrCreateSessionId();
let sessionSecret = localStorage.getItem(SECRET_KEY);
const token = getToken();
let ws = null;
let reconnectAttempts = 0;
let reconnectTimer = null;
let openApprovalId = null;
const streams = new Map(); // message_id -> {el, text, chunks}
const tools = new Map(); // tool_call_id -> element

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

// --- Rendering ---

function scrollDown() {
  const box = $('messages');
  box.scrollTop = box.scrollHeight;
}

function addMessage(role, text) {
  const el = document.createElement('div');
  el.className = `msg ${role}`;
  el.textContent = text;
  $('messages').append(el);
  scrollDown();
  return el;
}

function addNotice(kind, text) {
  const el = document.createElement('div');
  el.className = `notice ${kind}`;
  el.textContent = text;
  $('messages').append(el);
  scrollDown();
  return el;
}

const TOOL_VERBS = { search_regulations: 'Searching regulations', generate_inspection_report: 'Generating the inspection report' };

function renderTool(frame) {
  let el = tools.get(frame.tool_call_id);
  if (!el) {
    el = document.createElement('div');
    el.className = 'tool';
    el.dataset.toolCallId = frame.tool_call_id;
    el.dataset.tool = frame.tool_name;
    $('messages').append(el);
    tools.set(frame.tool_call_id, el);
  }
  el.dataset.status = frame.status;
  const name = frame.tool_name;
  if (frame.status === 'started') {
    el.innerHTML = '<span class="spinner"></span>';
    el.append(`${TOOL_VERBS[name] || `Running ${name}`}…`);
  } else {
    const badge = document.createElement('span');
    badge.className = 'badge';
    badge.textContent = frame.status === 'completed' ? '✓' : '✗';
    el.replaceChildren(badge, ` ${name}: ${frame.result || frame.status}`);
  }
  scrollDown();
}

function onChunk(frame) {
  let stream = streams.get(frame.message_id);
  if (!stream) {
    const el = addMessage('assistant', '');
    el.dataset.messageId = frame.message_id;
    el.classList.add('streaming');
    stream = { el, text: '', chunks: 0 };
    streams.set(frame.message_id, stream);
  }
  stream.text += frame.content;
  stream.chunks += 1;
  stream.el.textContent = stream.text;
  stream.el.dataset.chunks = String(stream.chunks);
  if (frame.is_final) {
    stream.el.classList.remove('streaming');
    stream.el.dataset.final = 'true';
  }
  scrollDown();
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

function onError(frame) {
  const text = {
    moderation_violation: 'Your message was blocked. Please rephrase.',
    rate_limit_exceeded: 'Too many requests. Please wait a moment.',
    invalid_json: 'The node could not read a message (invalid JSON).',
  }[frame.error_code] || frame.message;
  const el = addNotice('error', text);
  el.dataset.code = frame.error_code;
  $('send').disabled = false;
  if (frame.error_code === 'rate_limit_exceeded') {
    $('send').disabled = true;
    setTimeout(() => { $('send').disabled = false; }, 5000);
  }
  if (frame.error_code === 'invalid_session') {
    startNewSession();
  }
}

function openApproval(frame) {
  openApprovalId = frame.approval_id;
  $('approval-tool').textContent = frame.tool_name;
  const risk = $('approval-risk');
  risk.textContent = `${frame.risk_level} risk`;
  risk.className = `risk risk-${frame.risk_level}`;
  $('approval').dataset.risk = frame.risk_level;
  $('approval-description').textContent = frame.tool_description;
  $('approval-reasoning').textContent = frame.reasoning;
  $('approval-parameters').textContent = JSON.stringify(frame.parameters, null, 2);
  $('feedback').value = '';
  const dialog = $('approval');
  if (!dialog.open) dialog.showModal();
}

function closeApproval() {
  openApprovalId = null;
  const dialog = $('approval');
  if (dialog.open) dialog.close();
}

function answerApproval(approved) {
  if (!openApprovalId) return;
  const feedback = $('feedback').value.trim();
  const frame = { type: 'tool_approval_response', approval_id: openApprovalId, approved };
  if (feedback) frame.feedback = feedback;
  send(frame);
  addNotice(approved ? 'approved' : 'rejected', approved ? 'You approved the tool call.' : `You rejected the tool call${feedback ? `: “${feedback}”` : '.'}`);
  closeApproval();
}

function handleMessage(frame) {
  switch (frame.type) {
    case 'assistant_message_chunk': return onChunk(frame);
    case 'assistant_message': {
      const el = addMessage('assistant', frame.content);
      el.dataset.final = 'true';
      return;
    }
    case 'tool_call':
      // Answered elsewhere (another tab) or timed out: the modal is stale.
      if (frame.metadata && frame.metadata.approval_id && frame.metadata.approval_id === openApprovalId) closeApproval();
      return renderTool(frame);
    case 'tool_approval_request': return openApproval(frame);
    case 'status': return onStatus(frame);
    case 'error': return onError(frame);
    case 'session': return onSession(frame);
    default: console.warn('unknown frame type', frame.type);
  }
}

// --- History (the node keeps it; a reload shows the conversation again) ---

async function loadHistory() {
  $('messages').replaceChildren();
  streams.clear();
  tools.clear();
  try {
    const headers = {};
    if (sessionSecret) headers['X-HAI-Session-Secret'] = sessionSecret;
    if (token) headers.Authorization = `Bearer ${token}`;
    const reply = await fetch(`${wsPath}/sessions/${encodeURIComponent(sessionId)}/history`, { headers });
    if (!reply.ok) throw new Error(`HTTP ${reply.status}`);
    const { entries } = await reply.json();
    for (const entry of entries) {
      const body = entry.body || {};
      if (entry.role === 'user') addMessage('user', body.content).dataset.history = 'true';
      else if (entry.role === 'assistant') {
        const el = addMessage('assistant', body.content);
        el.dataset.history = 'true';
        el.dataset.final = 'true';
      } else if (entry.role === 'tool') {
        renderTool({ tool_call_id: body.tool_call_id, tool_name: body.tool_name, status: body.status, result: body.result });
      } else if (entry.role === 'approval') {
        addNotice(body.approved ? 'approved' : 'rejected', body.approved ? `Approved ${body.tool_name}.` : `Rejected ${body.tool_name}${body.feedback ? `: “${body.feedback}”` : '.'}`);
      }
    }
    document.body.dataset.history = String(entries.length);
  } catch (error) {
    console.error('history not loaded', error);
    addNotice('error', 'The conversation history could not be loaded.');
  }
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
    addNotice('error', 'Not connected. Retrying…');
    return false;
  }
  ws.send(JSON.stringify(frame));
  return true;
}

async function startNewSession() {
  sessionId = newId();
  sessionSecret = null;
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
    addNotice('error', `Messages are limited to ${MAX_CONTENT_CHARS} characters.`);
    return;
  }
  if (send({ type: 'user_message', content, session_id: sessionId, metadata: {} })) {
    addMessage('user', content);
    $('input').value = '';
    $('send').disabled = true;
  }
}

$('composer').addEventListener('submit', submit);
$('input').addEventListener('keydown', (event) => {
  if (event.key === 'Enter' && !event.shiftKey) submit(event);
});
$('approve').addEventListener('click', () => answerApproval(true));
$('reject').addEventListener('click', () => answerApproval(false));
// The decision is required: Escape does not dismiss the modal.
$('approval').addEventListener('cancel', (event) => event.preventDefault());
$('new-session').addEventListener('click', startNewSession);
$('session-id').textContent = sessionId;

loadHistory().then(connect);
