// Tool activity as cards in the conversation (hai-protocol.md §4–§6). One card
// follows one tool call through its life: pending approval → running →
// completed / failed (or rejected). A tool that needs a human starts as the
// `tool_approval_request` card; the `tool_call` frames that follow name its
// approval in `metadata.approval_id`, so they update that same card.
//
// Everything the node or plugin said goes in with textContent: tool names,
// parameters and results are untrusted text.

const STATE_TEXT = {
  pending: 'Waiting for your approval',
  running: 'Running…',
  completed: 'Completed',
  failed: 'Failed',
  rejected: 'Rejected',
};
const FRAME_STATUS = { started: 'running', completed: 'completed', failed: 'failed' };

let log = null;
let answer = null;
let ids = 0; // element ids the labels point at
const byCall = new Map(); // tool_call_id -> card
const byApproval = new Map(); // approval_id -> card

/** `logElement` receives the cards; `onAnswer(approvalId, approved, feedback)` sends a decision and says whether it went out. */
export function initCards(logElement, onAnswer) {
  log = logElement;
  answer = onAnswer;
}

/** Whether a card already shows tool call `toolCallId` (its failure needs no second notice). */
export function showsCall(toolCallId) {
  return byCall.has(toolCallId);
}

export function clearCards() {
  byCall.clear();
  byApproval.clear();
}

function element(tag, className, text) {
  const el = document.createElement(tag);
  if (className) el.className = className;
  if (text !== undefined) el.textContent = text;
  return el;
}

function newCard(toolName, parameters) {
  const card = element('article', 'card tool');
  card.dataset.tool = toolName;
  const head = element('div', 'card-head');
  const name = element('code', 'tool-name', toolName);
  name.id = `tool-${(ids += 1)}`;
  card.setAttribute('aria-labelledby', name.id);
  head.append(element('span', 'card-icon'), name, element('span', 'state'));
  const details = element('details', 'parameters');
  details.append(element('summary', '', 'Parameters'), element('pre', '', JSON.stringify(parameters ?? {}, null, 2)));
  card.append(head, details, element('p', 'card-result'));
  card.querySelector('.card-icon').setAttribute('aria-hidden', 'true');
  card.querySelector('.card-result').hidden = true;
  log.append(card);
  return card;
}

function setState(card, state, result) {
  card.dataset.status = state;
  card.querySelector('.state').textContent = STATE_TEXT[state] || state;
  if (result !== undefined && result !== null && result !== '') {
    const line = card.querySelector('.card-result');
    line.textContent = result;
    line.hidden = false;
  }
}

/** A `tool_call` frame (or a history entry shaped like one). */
export function onToolCall(frame) {
  const approvalId = frame.metadata && frame.metadata.approval_id;
  let card = byCall.get(frame.tool_call_id) || (approvalId && byApproval.get(approvalId));
  if (!card) card = newCard(frame.tool_name, frame.parameters);
  byCall.set(frame.tool_call_id, card);
  card.dataset.toolCallId = frame.tool_call_id;
  if (card.dataset.approvalId) settle(card, null, null);
  if (frame.status === 'failed' && frame.result === 'rejected') {
    // Our own rejection already shows the feedback given; another tab's shows the node's word.
    setState(card, 'rejected', card.dataset.decision === 'rejected' ? undefined : frame.result);
  } else {
    setState(card, FRAME_STATUS[frame.status] || frame.status, frame.result);
  }
  return card;
}

/** A `tool_approval_request`: a card that asks, with its own feedback box and buttons. */
export function onApprovalRequest(frame) {
  const existing = byApproval.get(frame.approval_id);
  if (existing) return existing;
  const card = newCard(frame.tool_name, frame.parameters);
  card.classList.add('approval');
  card.dataset.approvalId = frame.approval_id;
  card.dataset.risk = frame.risk_level;
  byApproval.set(frame.approval_id, card);

  const risk = element('span', `risk risk-${frame.risk_level}`, `${frame.risk_level} risk`);
  card.querySelector('.card-head').insertBefore(risk, card.querySelector('.state'));
  const details = card.querySelector('details');
  details.open = true;
  const about = [];
  if (frame.tool_description) about.push(element('p', 'description', frame.tool_description));
  if (frame.reasoning) {
    const why = element('p', 'reasoning');
    why.append(element('strong', '', 'Why: '), frame.reasoning);
    about.push(why);
  }
  details.before(...about);

  const id = `feedback-${(ids += 1)}`;
  const label = element('label', 'feedback-label', 'Feedback (optional)');
  label.htmlFor = id;
  const feedback = element('textarea', 'feedback');
  feedback.id = id;
  feedback.rows = 2;
  feedback.maxLength = 2000;
  feedback.placeholder = 'Tell the assistant why, or what to change';
  const reject = element('button', 'reject', 'Reject');
  const approve = element('button', 'approve', 'Approve');
  reject.type = 'button';
  approve.type = 'button';
  const actions = element('div', 'actions');
  actions.append(reject, approve);
  card.querySelector('.card-result').before(label, feedback, actions);

  const decide = (approved) => {
    const text = feedback.value.trim();
    if (answer(frame.approval_id, approved, text)) settle(card, approved, text);
  };
  approve.addEventListener('click', () => decide(true));
  reject.addEventListener('click', () => decide(false));
  setState(card, 'pending');
  return card;
}

/** Answered (here, in another tab, or timed out): the card asks no more. */
function settle(card, approved, feedback) {
  if (card.dataset.decision) return;
  card.dataset.decision = approved === null ? 'answered' : approved ? 'approved' : 'rejected';
  for (const control of card.querySelectorAll('button, textarea')) control.disabled = true;
  if (approved === true) setState(card, 'running');
  if (approved === false) setState(card, 'rejected', feedback ? `You rejected it: “${feedback}”` : 'You rejected it.');
}

/** History: the decision on an approval this page shows. */
export function onApprovalDecision(body) {
  const card = byApproval.get(body.approval_id);
  if (card) settle(card, Boolean(body.approved), body.feedback || '');
}

/** History: a recorded tool result; it belongs to the newest unfinished approval card of that tool, if any. */
export function onRecordedTool(body) {
  const waiting = [...byApproval.values()].reverse().find((card) => card.dataset.tool === body.tool_name && !card.dataset.toolCallId);
  const frame = { ...body, metadata: waiting ? { approval_id: waiting.dataset.approvalId } : {} };
  return onToolCall(frame);
}
