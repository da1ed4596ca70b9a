// The operator's console page (docs/console.md), served by the node under
// `console.path`. A plain ES module, no build step, like the HAI page; every
// url is relative because the path is configurable.
//
// Access: the token is asked once and kept in sessionStorage for this tab
// only, never in a cookie that another site's request could ride. Without it
// the page shows the sign-in and nothing else, and asks the node for nothing;
// a 401 on any call drops back to the sign-in.
//
// Data: one live stream, `api/events` (server-sent events). EventSource cannot
// send the Authorization header, so the stream is read with fetch() and parsed
// here; it reconnects with backoff and says so in `#live`. Every event carries
// the whole JSON of the matching GET, so each part of the page is redrawn
// from its last event alone. No widget polls: only the answers to the
// operator's own actions (approve, upload, remove) refresh the page early.
//
// Everything shown came from plugins, clients or logs: untrusted text, put in
// with textContent only. The CSP forbids inline styles, so the few widths that
// follow data go through the CSSOM.

const TOKEN_KEY = 'agora-console-token';
const VIEWS = ['overview', 'plugins', 'approvals', 'activity', 'log', 'fleet'];
const RECONNECT_BASE_MS = 1000;
const RECONNECT_MAX_MS = 30000;
/** Three missed keepalives (every 15 s): the stream is dead even if the socket is not. */
const STALL_MS = 45000;
/** What `PUT api/plugins/{file}` accepts as a file name (without `.wasm`). */
const FILE_STEM = /^[A-Za-z0-9_-]{1,64}$/;
const MAX_FEEDBACK_CHARS = 2000;
/** A deadline this close is shown as urgent. */
const URGENT_MS = 30000;
const PLOT_HEIGHT = 120;

const $ = (id) => document.getElementById(id);

let token = sessionStorage.getItem(TOKEN_KEY);
let shownView = null;
let stream = null; // the AbortController of the live stream
let reconnectTimer = null;
let reconnectAttempts = 0;
let ticker = null;
let awaitedUpload = null; // the file name of an upload still compiling when the node answered

const state = {
  overview: null,
  overviewAt: 0, // Date.now() when the overview arrived: uptime ticks from there
  series: null,
  plugins: [],
  approvals: new Map(), // approval_id -> {row, skewMs, card}
  activity: null,
  log: [],
  fleet: null,
};
const charts = new Map(); // transport name -> {rates, latency} uPlot instances

// --- Small helpers ---

/** An element with a class, text and attributes; children appended. */
function el(tag, options = {}, ...children) {
  const node = document.createElement(tag);
  if (options.className) node.className = options.className;
  if (options.text !== undefined && options.text !== null) node.textContent = String(options.text);
  for (const [name, value] of Object.entries(options.attrs || {})) {
    if (value !== undefined && value !== null) node.setAttribute(name, String(value));
  }
  node.append(...children.filter((child) => child !== null && child !== undefined));
  return node;
}

const pad = (n) => String(n).padStart(2, '0');
const number = (n) => (typeof n === 'number' ? n.toLocaleString('en') : '–');
const orDash = (value) => (value === null || value === undefined || value === '' ? '–' : String(value));
let uniqueIds = 0;
const uniqueId = (prefix) => `${prefix}-${(uniqueIds += 1)}`;

function clock(ms) {
  const d = new Date(ms);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

function dateTime(ms) {
  if (typeof ms !== 'number') return '–';
  const d = new Date(ms);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${clock(ms)}`;
}

function duration(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  const days = Math.floor(s / 86400);
  const hours = Math.floor((s % 86400) / 3600);
  const minutes = Math.floor((s % 3600) / 60);
  if (days) return `${days} d ${hours} h`;
  if (hours) return `${hours} h ${minutes} min`;
  if (minutes) return `${minutes} min ${s % 60} s`;
  return `${s} s`;
}

/** A moment of today as its time, an older one with its date. */
function sinceText(ms) {
  if (typeof ms !== 'number') return '–';
  return new Date(ms).toDateString() === new Date().toDateString() ? clock(ms) : dateTime(ms);
}

function bytes(n) {
  if (typeof n !== 'number') return '–';
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

const millis = (ms) => (typeof ms === 'number' ? `${ms < 10 ? ms.toFixed(1) : Math.round(ms)} ms` : '–');
const fileName = (path) => String(path || '').split(/[\\/]/).pop();
const fileStem = (path) => fileName(path).replace(/\.wasm$/i, '');
const errorOf = (reply) => (reply.body && typeof reply.body.error === 'string' ? reply.body.error : `HTTP ${reply.status}`);

/**
 * Put `nodes` in `container` in this order, moving only those out of place:
 * a moved element loses focus, and an operator typing feedback must not.
 */
function arrange(container, nodes) {
  nodes.forEach((node, index) => {
    const current = container.children[index];
    if (current !== node) container.insertBefore(node, current || null);
  });
}

/**
 * Make `old` show what `fresh` shows, replacing only the cells that differ, so
 * that a button in an unchanged cell keeps its focus (and a click under way)
 * while the counters beside it move every second.
 */
function patchRow(old, fresh) {
  for (const name of fresh.getAttributeNames()) old.setAttribute(name, fresh.getAttribute(name));
  const cells = [...fresh.cells];
  cells.forEach((cell, index) => {
    const current = old.cells[index];
    if (!current) old.append(cell);
    else if (current.outerHTML !== cell.outerHTML) current.replaceWith(cell);
  });
  while (old.cells.length > cells.length) old.cells[old.cells.length - 1].remove();
}

function announce(text) {
  $('announcer').textContent = text;
}

// --- Talking to the node ---

class SignedOut extends Error {}

/** One API call with the token: `{status, ok, body}`; a 401 signs out. */
async function api(path, options = {}) {
  if (!token) throw new SignedOut('signed out');
  const response = await fetch(`api/${path}`, {
    ...options,
    cache: 'no-store',
    headers: { Authorization: `Bearer ${token}`, ...(options.headers || {}) },
  });
  if (response.status === 401) {
    signOut('The node refused the token. Sign in again.');
    throw new SignedOut('token refused');
  }
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  return { status: response.status, ok: response.ok, body };
}

/** A parser of a server-sent event stream (the HTML standard's rules), fed text as it arrives. */
function sseParser(onEvent) {
  let buffer = '';
  let name = '';
  let data = [];
  return (chunk) => {
    buffer += chunk;
    // A lone "\r" at the end may be the first half of "\r\n": it waits for the next chunk.
    const lines = buffer.split(/\r\n|\n|\r(?!$)/);
    buffer = lines.pop();
    for (const line of lines) {
      if (line === '') {
        if (data.length) onEvent(name || 'message', data.join('\n'));
        name = '';
        data = [];
        continue;
      }
      if (line.startsWith(':')) continue; // a comment: the keepalive
      const colon = line.indexOf(':');
      const field = colon === -1 ? line : line.slice(0, colon);
      let value = colon === -1 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'event') name = value;
      else if (field === 'data') data.push(value);
    }
  };
}

const HANDLERS = {
  overview: onOverview,
  series: onSeries,
  plugins: onPlugins,
  approvals: onApprovals,
  activity: onActivity,
  log: onLog,
  fleet: onFleet,
};

function onEvent(name, data) {
  const handler = HANDLERS[name];
  if (!handler) return;
  let value;
  try {
    value = JSON.parse(data);
  } catch {
    console.warn(`console: a ${name} event that is not JSON`);
    return;
  }
  handler(value);
}

function setLive(liveState, text) {
  $('live').dataset.state = liveState;
  $('live-text').textContent = text;
}

/** Open the live stream; when it ends for any reason but signing out, try again later. */
async function connect() {
  clearTimeout(reconnectTimer);
  if (stream) stream.abort();
  const controller = new AbortController();
  stream = controller;
  setLive('connecting', 'Connecting…');
  let stall = null;
  const watch = () => {
    clearTimeout(stall);
    stall = setTimeout(() => controller.abort(), STALL_MS);
  };
  try {
    const response = await fetch('api/events', {
      headers: { Authorization: `Bearer ${token}`, Accept: 'text/event-stream' },
      cache: 'no-store',
      signal: controller.signal,
    });
    if (response.status === 401) {
      signOut('The node refused the token. Sign in again.');
      return;
    }
    if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
    reconnectAttempts = 0;
    setLive('live', 'Live');
    const feed = sseParser(onEvent);
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    watch();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      watch();
      feed(value);
    }
  } catch (error) {
    if (stream !== controller) return; // signed out, or replaced by a newer stream
    console.warn('console: the live stream broke:', error.message);
  } finally {
    clearTimeout(stall);
  }
  if (stream === controller) scheduleReconnect();
}

function scheduleReconnect() {
  const delay = Math.min(RECONNECT_MAX_MS, RECONNECT_BASE_MS * 2 ** reconnectAttempts);
  reconnectAttempts += 1;
  // Jitter, so that consoles cut off together do not come back together.
  const wait = Math.round(delay * (0.75 + Math.random() * 0.5));
  setLive('off', `Offline, retrying in ${Math.ceil(wait / 1000)} s`);
  reconnectTimer = setTimeout(connect, wait);
}

// --- Sign-in, sign-out, views ---

async function signIn(event) {
  event.preventDefault();
  const candidate = $('token').value.trim();
  const error = $('signin-error');
  error.textContent = '';
  error.dataset.kind = 'error';
  if (!candidate) {
    error.textContent = 'Enter the console token.';
    return;
  }
  if (!/^[\x21-\x7e]+$/.test(candidate)) {
    error.textContent = 'That token was not accepted: a console token is printable ASCII without spaces.';
    return;
  }
  $('sign-in').disabled = true;
  try {
    const response = await fetch('api/overview', {
      headers: { Authorization: `Bearer ${candidate}` },
      cache: 'no-store',
    });
    if (response.status === 401) {
      error.textContent = 'That token was not accepted.';
      $('token').select();
      return;
    }
    if (!response.ok) {
      let reason = `HTTP ${response.status}`;
      try {
        reason = (await response.json()).error || reason;
      } catch { /* the status says enough */ }
      error.textContent = `The node could not sign you in: ${reason}`;
      return;
    }
    const overview = await response.json();
    token = candidate;
    sessionStorage.setItem(TOKEN_KEY, token);
    $('token').value = '';
    enterConsole();
    onOverview(overview);
  } catch (failure) {
    error.textContent = `Could not reach the node: ${failure.message}`;
  } finally {
    $('sign-in').disabled = false;
  }
}

function enterConsole() {
  document.body.dataset.signedIn = 'true';
  $('view-signin').hidden = true;
  $('nav').hidden = false;
  $('session-controls').hidden = false;
  route(true);
  ticker = setInterval(tick, 1000);
  connect();
}

/** Back to the sign-in: the token, the stream and every piece of data shown go; `message` says why. */
function signOut(message, kind = 'error') {
  token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  const closing = stream;
  stream = null;
  if (closing) closing.abort();
  clearTimeout(reconnectTimer);
  clearInterval(ticker);
  setLive('off', 'Offline');
  forgetData();
  if ($('manifest-dialog').open) $('manifest-dialog').close();
  document.body.dataset.signedIn = 'false';
  $('nav').hidden = true;
  $('session-controls').hidden = true;
  for (const view of document.querySelectorAll('.view[data-view]')) view.hidden = true;
  shownView = null;
  $('view-signin').hidden = false;
  $('signin-error').textContent = message || '';
  $('signin-error').dataset.kind = kind;
  $('token').focus();
}

function forgetData() {
  for (const plots of charts.values()) {
    plots.rates.destroy();
    plots.latency.destroy();
  }
  charts.clear();
  Object.assign(state, { overview: null, series: null, plugins: [], activity: null, log: [], fleet: null });
  state.approvals.clear();
  for (const id of ['ov-version', 'ov-uptime', 'ov-store', 'ov-plugins', 'ov-approvals']) $(id).textContent = '–';
  for (const id of ['transports', 'plugins-body', 'approvals-list', 'usage-plugins', 'usage-callers',
    'act-hai', 'act-a2a', 'act-mcp', 'act-agora', 'history-list', 'log-body', 'fleet-nodes', 'fleet-set']) $(id).replaceChildren();
  awaitedUpload = null;
  for (const id of ['upload-result', 'usage-text', 'history-error', 'log-count', 'announcer', 'fleet-summary']) $(id).textContent = '';
  $('history').hidden = true;
  setBadge(0);
}

function requestedView() {
  const name = location.hash.slice(1);
  return VIEWS.includes(name) ? name : null;
}

/** Show the view the address names (or the one shown, or the overview). */
function route(moveFocus) {
  if (!token) return;
  const view = requestedView() || shownView || 'overview';
  shownView = view;
  for (const section of document.querySelectorAll('.view[data-view]')) {
    section.hidden = section.dataset.view !== view;
  }
  for (const link of document.querySelectorAll('nav a[data-view]')) {
    if (link.dataset.view === view) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  // Charts measure their container, which has no width while hidden.
  if (view === 'overview') drawCharts();
  if (moveFocus) $(`${view}-title`).focus();
}

function tick() {
  showUptime();
  for (const entry of state.approvals.values()) showTimes(entry);
}

// --- Overview ---

function onOverview(overview) {
  state.overview = overview;
  state.overviewAt = Date.now();
  $('ov-version').textContent = orDash(overview.version);
  showUptime();
  const store = overview.store || {};
  const storeText = store.answers
    ? `${orDash(store.backend)}, answering`
    : `${orDash(store.backend)}, not answering${store.error ? `: ${store.error}` : ''}`;
  $('ov-store').textContent = storeText;
  $('ov-store').dataset.answers = String(Boolean(store.answers));
  const counts = overview.plugins || {};
  const parts = ['loaded', 'failed', 'compiling', 'pending', 'starting']
    .filter((key) => counts[key])
    .map((key) => `${counts[key]} ${key}`);
  $('ov-plugins').textContent = parts.length ? parts.join(', ') : 'none';
  $('ov-approvals').textContent = number(overview.approvals_waiting);
  showTransports(overview.transports || []);
}

function showUptime() {
  if (!state.overview || typeof state.overview.uptime_ms !== 'number') return;
  $('ov-uptime').textContent = duration(state.overview.uptime_ms + (Date.now() - state.overviewAt));
}

function endpointText(transport) {
  const where = `${orDash(transport.listen)}${transport.path || ''}`;
  return transport.own_listener ? `${where} (own listener)` : where;
}

/** One card per enabled transport, kept across updates so that its charts stay. */
function showTransports(transports) {
  const enabled = transports.filter((t) => t.enabled);
  const container = $('transports');
  const wanted = new Set(enabled.map((t) => t.name));
  for (const card of [...container.children]) {
    if (!wanted.has(card.dataset.name)) {
      dropChart(card.dataset.name);
      card.remove();
    }
  }
  const cards = enabled.map((transport) => {
    const card = container.querySelector(`.transport[data-name="${CSS.escape(transport.name)}"]`)
      || transportCard(transport.name);
    card.querySelector('.endpoint').textContent = endpointText(transport);
    return card;
  });
  arrange(container, cards); // in the overview's order
  if (!enabled.length) container.replaceChildren(el('p', { className: 'empty', text: 'No transport is enabled.' }));
  showSeries();
  if (shownView === 'overview') drawCharts();
}

function transportCard(name) {
  const titleId = uniqueId('transport');
  const ratesLabel = `Requests and errors per second, ${name}, last 15 minutes`;
  const latencyLabel = `p50 and p99 latency in milliseconds, ${name}, last 15 minutes`;
  return el('article', { className: 'transport', attrs: { 'data-name': name, 'aria-labelledby': titleId } },
    el('h4', { text: name, attrs: { id: titleId } }),
    el('p', { className: 'endpoint' }),
    el('figure', { className: 'chart', attrs: { 'data-transport': name, 'data-points': 0, 'data-requests': 0, 'data-errors': 0 } },
      el('p', { className: 'plot-title', attrs: { 'aria-hidden': 'true' } },
        el('span', { className: 'key requests' }), 'requests/s', el('span', { className: 'key errors' }), 'errors/s'),
      el('div', { className: 'plot rates', attrs: { role: 'img', 'aria-label': ratesLabel } }),
      el('p', { className: 'plot-title', attrs: { 'aria-hidden': 'true' } },
        el('span', { className: 'key p50' }), 'p50 ms', el('span', { className: 'key p99' }), 'p99 ms'),
      el('div', { className: 'plot latency', attrs: { role: 'img', 'aria-label': latencyLabel } }),
      el('figcaption', { className: 'summary', text: 'No samples yet.' })));
}

// --- Charts (uPlot) ---

function onSeries(series) {
  state.series = series;
  showSeries();
}

/** The points of transport `name`, as uPlot's columns: time (s), req/s, err/s, p50, p99. */
function columns(name) {
  const series = state.series;
  const transport = series && (series.transports || []).find((t) => t.name === name);
  const points = (transport && transport.points) || [];
  const seconds = (series && series.interval_ms ? series.interval_ms : 5000) / 1000;
  return {
    points,
    data: [
      points.map((p) => p.at_ms / 1000),
      points.map((p) => p.requests / seconds),
      points.map((p) => p.errors / seconds),
      points.map((p) => (typeof p.p50_ms === 'number' ? p.p50_ms : null)),
      points.map((p) => (typeof p.p99_ms === 'number' ? p.p99_ms : null)),
    ],
    seconds,
  };
}

/** What the charts show, in words and attributes: for screen readers, and for the tests. */
function showSeries() {
  for (const figure of document.querySelectorAll('.chart[data-transport]')) {
    const name = figure.dataset.transport;
    const { points, data, seconds } = columns(name);
    const requests = points.reduce((sum, p) => sum + (p.requests || 0), 0);
    const errors = points.reduce((sum, p) => sum + (p.errors || 0), 0);
    figure.dataset.points = String(points.length);
    figure.dataset.requests = String(requests);
    figure.dataset.errors = String(errors);
    const last = points[points.length - 1];
    figure.querySelector('.summary').textContent = last
      ? `Last ${seconds} s: ${rate(data[1].at(-1))} requests/s, ${rate(data[2].at(-1))} errors/s, `
        + `p50 ${millis(last.p50_ms)}, p99 ${millis(last.p99_ms)}. `
        + `15 min: ${number(requests)} requests, ${number(errors)} errors.`
      : 'No samples yet.';
    const plots = charts.get(name);
    if (plots) {
      plots.rates.setData([data[0], data[1], data[2]]);
      plots.latency.setData([data[0], data[3], data[4]]);
    }
  }
}

const rate = (perSecond) => (perSecond >= 10 ? perSecond.toFixed(0) : perSecond.toFixed(1));

function hourMinute(seconds) {
  const d = new Date(seconds * 1000);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

function cssColor(variable) {
  return getComputedStyle(document.documentElement).getPropertyValue(variable).trim();
}

function plotOptions(width, lines) {
  const axis = {
    stroke: cssColor('--muted'),
    grid: { stroke: cssColor('--line'), width: 1 },
    ticks: { stroke: cssColor('--line'), width: 1 },
  };
  return {
    width,
    height: PLOT_HEIGHT,
    legend: { show: false },
    cursor: { show: false },
    select: { show: false },
    scales: { x: { time: true }, y: { range: (u, min, max) => [0, max > 0 ? max * 1.15 : 1] } },
    axes: [{ ...axis, space: 70, values: (u, splits) => splits.map(hourMinute) }, { ...axis, size: 46 }],
    series: [{}, ...lines.map(([label, color]) => ({ label, stroke: cssColor(color), width: 2, spanGaps: false }))],
  };
}

/** Make the charts of the cards on screen that have none yet (uPlot needs their width). */
function drawCharts() {
  if (!window.uPlot) return; // the summaries still say it all
  for (const figure of document.querySelectorAll('.chart[data-transport]')) {
    const name = figure.dataset.transport;
    if (charts.has(name)) continue;
    const ratesBox = figure.querySelector('.plot.rates');
    const width = ratesBox.clientWidth;
    if (!width) continue;
    const { data } = columns(name);
    const rates = new window.uPlot(
      plotOptions(width, [['requests/s', '--chart-requests'], ['errors/s', '--chart-errors']]),
      [data[0], data[1], data[2]],
      ratesBox,
    );
    const latency = new window.uPlot(
      plotOptions(width, [['p50 ms', '--chart-p50'], ['p99 ms', '--chart-p99']]),
      [data[0], data[3], data[4]],
      figure.querySelector('.plot.latency'),
    );
    charts.set(name, { rates, latency });
  }
}

function dropChart(name) {
  const plots = charts.get(name);
  if (!plots) return;
  plots.rates.destroy();
  plots.latency.destroy();
  charts.delete(name);
}

let resizePending = false;
const resizer = new ResizeObserver(() => {
  if (resizePending) return;
  resizePending = true;
  requestAnimationFrame(() => {
    resizePending = false;
    for (const [name, plots] of charts) {
      const figure = document.querySelector(`.chart[data-transport="${CSS.escape(name)}"]`);
      const width = figure ? figure.querySelector('.plot.rates').clientWidth : 0;
      if (!width || width === plots.rates.width) continue;
      plots.rates.setSize({ width, height: PLOT_HEIGHT });
      plots.latency.setSize({ width, height: PLOT_HEIGHT });
    }
  });
});
resizer.observe($('transports'));

// --- Plugins ---

const pluginKey = (row) => row.name || fileStem(row.file);

function onPlugins(reply) {
  state.plugins = reply.plugins || [];
  showPlugins();
  settleAwaitedUpload();
}

/** Put one row from an action's answer in place of the one of the same file. */
function upsertPlugin(row) {
  if (!row) return;
  const index = state.plugins.findIndex((p) => p.file === row.file);
  if (index === -1) state.plugins.push(row);
  else state.plugins[index] = row;
  showPlugins();
}

/** The table, row by row: a row of the same file is patched, not replaced (see patchRow). */
function showPlugins() {
  const body = $('plugins-body');
  if (!state.plugins.length) {
    body.replaceChildren(el('tr', {}, el('td', { className: 'empty-row', text: 'none', attrs: { colspan: 14 } })));
    return;
  }
  const shown = new Map([...body.querySelectorAll('tr[data-file]')].map((tr) => [tr.dataset.file, tr]));
  const rows = state.plugins.map((row) => {
    const fresh = pluginRow(row);
    const old = shown.get(fresh.dataset.file);
    if (!old) return fresh;
    patchRow(old, fresh);
    return old;
  });
  for (const child of [...body.children]) if (!rows.includes(child)) child.remove();
  arrange(body, rows);
}

function pluginRow(row) {
  const stats = row.stats || {};
  const key = pluginKey(row);
  const stateCell = el('td', { className: 'state-cell', attrs: { 'data-state': row.state } },
    el('span', { className: `state state-${row.state}`, text: row.state }));
  if (row.error) stateCell.append(el('p', { className: 'plugin-error', text: row.error }));
  const tools = el('ul', { className: 'tool-list' },
    ...(row.tools || []).map((tool) => el('li', {},
      el('code', { text: tool.name }), ' ',
      el('span', { className: `risk risk-${tool.risk}`, text: tool.risk }))));
  const actions = el('div', { className: 'row-actions' });
  if (row.name) {
    actions.append(el('button', {
      className: 'quiet', text: 'Manifest',
      attrs: { type: 'button', 'data-action': 'manifest', 'aria-label': `Manifest of ${row.name}` },
    }));
  }
  actions.append(el('button', {
    className: 'danger', text: 'Remove',
    attrs: { type: 'button', 'data-action': 'remove', 'aria-label': `Remove ${fileName(row.file)}` },
  }));
  const numeric = (text) => el('td', { className: 'num', text });
  // The actions sit under the name, where a narrow screen still shows them.
  return el('tr', { attrs: { 'data-plugin': key, 'data-file': fileName(row.file) } },
    el('th', { attrs: { scope: 'row' } }, el('span', { className: 'plugin-name', text: key }),
      el('span', { className: 'meta', text: fileName(row.file) }), actions),
    el('td', { text: orDash(row.version) }),
    el('td', { text: orDash(row.language) }),
    numeric(bytes(row.size)),
    el('td', {}, row.sha256 ? el('code', { text: row.sha256.slice(0, 12), attrs: { title: row.sha256 } }) : '–'),
    stateCell,
    el('td', { text: sinceText(row.loaded_at_ms) }),
    numeric(millis(row.compile_ms)),
    numeric(typeof stats.calls_per_minute === 'number' ? stats.calls_per_minute.toFixed(1) : '–'),
    numeric(number(stats.errors)),
    numeric(millis(stats.p99_ms)),
    numeric(number(stats.timeouts)),
    numeric(number(stats.limit_kills)),
    el('td', { className: 'tools' }, (row.tools || []).length ? tools : '–'));
}

function showUploadResult(outcome, text) {
  const result = $('upload-result');
  result.dataset.outcome = outcome;
  result.textContent = text;
}

async function upload(file) {
  const stem = file.name.replace(/\.wasm$/i, '');
  if (!/\.wasm$/i.test(file.name) || !FILE_STEM.test(stem)) {
    showUploadResult('failed', `${file.name} was not sent: the name must be NAME.wasm, NAME being 1 to 64 letters, digits, "-" or "_".`);
    return;
  }
  showUploadResult('sending', `Uploading ${file.name}…`);
  let reply;
  try {
    reply = await api(`plugins/${stem}`, { method: 'PUT', headers: { 'Content-Type': 'application/wasm' }, body: file });
  } catch (error) {
    if (!(error instanceof SignedOut)) showUploadResult('failed', `${file.name} was not sent: ${error.message}`);
    return;
  }
  const row = reply.body && reply.body.plugin;
  if (row) upsertPlugin(row);
  if (reply.status === 202) {
    // Still compiling when the node answered: the plugins events tell how it ends.
    awaitedUpload = file.name;
    showUploadResult('compiling', `${file.name} uploaded; still compiling…`);
    return;
  }
  if (reply.ok && row) showUploadOutcome(file.name, row, null);
  else showUploadOutcome(file.name, row, errorOf(reply));
}

/** Whether `row` loaded from the upload of `name`, or why not (a failed reload keeps the old version). */
function showUploadOutcome(name, row, error) {
  awaitedUpload = null;
  if (!error) {
    showUploadResult('loaded', `${name} loaded: ${[row.name, row.version].filter(Boolean).join(' ')}.`);
    return;
  }
  const serving = row && row.state === 'loaded'
    ? ` The version already loaded (${[row.name, row.version].filter(Boolean).join(' ')}) keeps serving.` : '';
  showUploadResult('failed', `${name} was not loaded: ${error}${serving}`);
}

/** The end of an upload the node answered while it was still compiling. */
function settleAwaitedUpload() {
  if (!awaitedUpload) return;
  const row = state.plugins.find((p) => fileName(p.file) === awaitedUpload);
  if (!row || row.state === 'compiling' || row.state === 'pending') return;
  showUploadOutcome(awaitedUpload, row, row.error);
}

async function removePlugin(row) {
  const name = fileName(row.file);
  if (!window.confirm(`Remove ${name} from the node? Its plugin stops serving.`)) return;
  let reply;
  try {
    reply = await api(`plugins/${fileStem(row.file)}`, { method: 'DELETE' });
  } catch (error) {
    if (!(error instanceof SignedOut)) showUploadResult('failed', `${name} was not removed: ${error.message}`);
    return;
  }
  if (!reply.ok) {
    showUploadResult('failed', `${name} was not removed: ${errorOf(reply)}`);
    return;
  }
  state.plugins = state.plugins.filter((p) => p.file !== row.file);
  showPlugins();
  showUploadResult('removed', `${name} removed.`);
}

async function showManifest(row, opener) {
  const dialog = $('manifest-dialog');
  $('manifest-title').textContent = `Manifest of ${row.name}`;
  $('manifest-summary').textContent = 'Loading…';
  $('manifest-error').textContent = '';
  $('manifest-json').textContent = '';
  $('manifest-protocols').replaceChildren();
  dialog.returnFocus = opener;
  dialog.showModal();
  let reply;
  try {
    reply = await api(`plugins/${encodeURIComponent(row.name)}`);
  } catch (error) {
    if (!(error instanceof SignedOut)) $('manifest-error').textContent = error.message;
    return;
  }
  if (!reply.ok || !reply.body) {
    $('manifest-summary').textContent = '';
    $('manifest-error').textContent = errorOf(reply);
    return;
  }
  const doc = reply.body;
  $('manifest-summary').textContent = [`${orDash(doc.name)} ${orDash(doc.version)}`, doc.description, fileName(doc.file)]
    .filter(Boolean).join(' · ');
  $('manifest-json').textContent = JSON.stringify(doc.manifest ?? {}, null, 2);
  const protocols = doc.protocols || [];
  $('manifest-protocols').replaceChildren(...(protocols.length
    ? protocols.flatMap((protocol) => [
      el('p', { className: 'protocol-hash' }, 'SHA-1 ', el('code', { text: protocol.hash })),
      el('pre', { className: 'protocol', text: protocol.text, attrs: { tabindex: 0, 'data-hash': protocol.hash } }),
    ])
    : [el('p', { className: 'empty', text: 'none' })]));
}

// --- Approvals ---

function onApprovals(reply) {
  const rows = reply.approvals || [];
  const now = Date.now();
  const listed = new Set(rows.map((row) => row.approval_id));
  for (const [id, entry] of state.approvals) {
    if (!listed.has(id)) forgetApproval(id, entry);
  }
  const fresh = [];
  const cards = rows.map((row) => {
    // The node's clock, as this browser's plus the skew: ages and deadlines tick locally.
    const skewMs = typeof row.age_ms === 'number' ? row.asked_at_ms + row.age_ms - now : 0;
    let entry = state.approvals.get(row.approval_id);
    if (!entry) {
      entry = { card: approvalCard(row) };
      state.approvals.set(row.approval_id, entry);
      fresh.push(row);
    }
    Object.assign(entry, { row, skewMs });
    showTimes(entry);
    return entry.card;
  });
  arrange($('approvals-list'), cards); // oldest first, as the node lists them
  showApprovalCount();
  if (fresh.length) {
    announce(fresh.map((row) => `New approval: ${row.tool} from ${row.transport.toUpperCase()}`).join('. '));
  }
}

function forgetApproval(id, entry) {
  // A card whose feedback box or button has focus hands it to the list's heading.
  const hadFocus = entry.card.contains(document.activeElement);
  entry.card.remove();
  state.approvals.delete(id);
  if (hadFocus) $('approvals-title').focus();
}

function showApprovalCount() {
  const count = state.approvals.size;
  setBadge(count);
  $('approvals-empty').hidden = count > 0;
}

function setBadge(count) {
  const badge = $('approvals-badge');
  badge.dataset.count = String(count);
  badge.firstChild.textContent = String(count);
  document.title = count ? `(${count}) Agora Node · Console` : 'Agora Node · Console';
}

function approvalCard(row) {
  const titleId = uniqueId('approval');
  const feedbackId = uniqueId('feedback');
  const card = el('article', {
    className: 'approval',
    attrs: {
      'data-approval-id': row.approval_id, 'data-transport': row.transport,
      'data-risk': row.risk, 'aria-labelledby': titleId,
    },
  },
  el('h3', { attrs: { id: titleId } },
    el('code', { text: row.tool }),
    el('span', { className: `risk risk-${row.risk}`, text: `${row.risk} risk` })),
  row.description ? el('p', { className: 'description', text: row.description }) : null,
  el('dl', {},
    el('dt', { text: 'Transport' }), el('dd', { className: 'transport-name', text: String(row.transport).toUpperCase() }),
    el('dt', { text: 'Scope' }), el('dd', {}, el('code', { text: row.scope })),
    el('dt', { text: 'Client' }), el('dd', { text: orDash(row.client) }),
    el('dt', { text: 'Asked' }), el('dd', { className: 'age' }),
    el('dt', { text: 'Deadline' }), el('dd', { className: 'deadline' })),
  el('p', { className: 'plot-title', text: 'Arguments' }),
  el('pre', { className: 'arguments', text: JSON.stringify(row.arguments ?? {}, null, 2), attrs: { tabindex: 0, 'aria-label': `Arguments of ${row.tool}` } }),
  el('label', { text: 'Feedback (optional)', attrs: { for: feedbackId } }),
  el('textarea', { className: 'feedback', attrs: { id: feedbackId, rows: 2, maxlength: MAX_FEEDBACK_CHARS } }),
  el('div', { className: 'actions' },
    el('button', { className: 'reject', text: 'Reject', attrs: { type: 'button' } }),
    el('button', { className: 'approve', text: 'Approve', attrs: { type: 'button' } })),
  el('p', { className: 'error-text', attrs: { role: 'alert' } }));
  card.querySelector('.approve').addEventListener('click', () => answer(card, true));
  card.querySelector('.reject').addEventListener('click', () => answer(card, false));
  return card;
}

function showTimes(entry) {
  const nodeNow = Date.now() + entry.skewMs;
  const { row, card } = entry;
  card.querySelector('.age').textContent = `${duration(nodeNow - row.asked_at_ms)} ago, at ${clock(row.asked_at_ms)}`;
  const left = row.deadline_ms - nodeNow;
  const deadline = card.querySelector('.deadline');
  deadline.textContent = left > 0
    ? `in ${Math.floor(left / 60000)}:${pad(Math.floor((left % 60000) / 1000))} (${clock(row.deadline_ms)})`
    : 'passed';
  deadline.dataset.urgent = String(left < URGENT_MS);
}

async function answer(card, approved) {
  const id = card.dataset.approvalId;
  const buttons = card.querySelectorAll('button');
  const error = card.querySelector('.error-text');
  const feedback = card.querySelector('.feedback').value.trim();
  for (const button of buttons) button.disabled = true;
  error.textContent = '';
  const body = feedback ? { approved, feedback } : { approved };
  let reply;
  try {
    reply = await api(`approvals/${encodeURIComponent(id)}`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
    });
  } catch (failure) {
    if (failure instanceof SignedOut) return;
    error.textContent = `Not sent: ${failure.message}`;
    for (const button of buttons) button.disabled = false;
    return;
  }
  if (reply.ok) {
    const entry = state.approvals.get(id);
    if (entry) forgetApproval(id, entry);
    showApprovalCount();
    announce(`${reply.body && reply.body.tool ? reply.body.tool : 'The tool'} ${approved ? 'approved' : 'rejected'}.`);
    return;
  }
  const why = { 404: 'It was already answered or timed out.', 409: 'Another answer got there first.' }[reply.status];
  error.textContent = why ? `${why} (${errorOf(reply)})` : errorOf(reply);
  // A bad request (feedback too long) may be corrected; a decided approval may not.
  if (reply.status === 400) for (const button of buttons) button.disabled = false;
}

// --- Activity ---

const stateName = (s) => String(s || '').replace(/^TASK_STATE_/, '').toLowerCase().replace(/_/g, ' ');

function onActivity(activity) {
  state.activity = activity;
  showItems('act-hai', 'hai', activity.hai_sessions);
  showItems('act-a2a', 'a2a', activity.a2a_tasks);
  showItems('act-mcp', 'mcp', activity.mcp_sessions);
  showItems('act-agora', 'agora', activity.agora_conversations);
  showUsage(activity.model_usage);
}

/** One line about a session, task or conversation: where it stands, who serves it, when. */
function describeThread(thread) {
  return [
    thread.state ? stateName(thread.state) : null,
    thread.plugin ? `plugin ${thread.plugin}` : null,
    typeof thread.last_at_ms === 'number' ? `last ${dateTime(thread.last_at_ms)}` : null,
    typeof thread.started_at_ms === 'number' ? `started ${dateTime(thread.started_at_ms)}` : null,
  ].filter(Boolean).join(' · ') || '–';
}

/** A list of sessions, tasks or conversations of `kind`; choosing one opens its history. */
function showItems(listId, kind, items) {
  const list = $(listId);
  if (!Array.isArray(items) || !items.length) {
    list.replaceChildren(el('li', {}, el('span', { className: 'none', text: 'none' })));
    return;
  }
  const history = $('history');
  const opened = !history.hidden && history.dataset.kind === kind ? history.dataset.id : null;
  const shown = new Map([...list.querySelectorAll('li[data-id]')].map((li) => [li.dataset.id, li]));
  const focusedId = list.contains(document.activeElement) ? document.activeElement.closest('li').dataset.id : null;
  const entries = items.map((item) => {
    const content = [el('code', { text: item.id }), el('br'), el('span', { className: 'meta', text: describeThread(item) })];
    const fresh = el('li', { attrs: { 'data-id': item.id } }, kind
      ? el('button', {
        attrs: {
          type: 'button', 'data-kind': kind, 'data-id': item.id, 'aria-controls': 'history',
          'aria-pressed': String(item.id === opened),
        },
      }, ...content)
      : el('span', {}, ...content));
    const old = shown.get(item.id);
    return old && old.outerHTML === fresh.outerHTML ? old : fresh;
  });
  for (const child of [...list.children]) if (!entries.includes(child)) child.remove();
  arrange(list, entries);
  // An item that changed while it had focus hands the focus to its new self.
  if (focusedId !== null && !list.contains(document.activeElement)) {
    const again = list.querySelector(`li[data-id="${CSS.escape(focusedId)}"] button`);
    if (again) again.focus();
  }
}

async function openHistory(button) {
  const { kind, id } = button.dataset;
  for (const other of document.querySelectorAll('.items button[aria-pressed="true"]')) other.setAttribute('aria-pressed', 'false');
  button.setAttribute('aria-pressed', 'true');
  const section = $('history');
  section.hidden = false;
  section.dataset.kind = kind;
  section.dataset.id = id;
  const label = { hai: 'HAI session', a2a: 'A2A task', mcp: 'MCP session', agora: 'Agora conversation' }[kind];
  $('history-title').textContent = `History of ${label} ${id}`;
  $('history-error').textContent = '';
  $('history-list').replaceChildren(el('li', { className: 'hint', text: 'Loading…' }));
  let reply;
  try {
    reply = await api(`activity/${kind}/${encodeURIComponent(id)}`);
  } catch (error) {
    if (!(error instanceof SignedOut)) $('history-error').textContent = error.message;
    return;
  }
  if (section.dataset.id !== id) return; // another item was chosen meanwhile
  if (!reply.ok || !reply.body) {
    $('history-list').replaceChildren();
    $('history-error').textContent = errorOf(reply);
    return;
  }
  const history = reply.body.history || [];
  $('history-list').replaceChildren(...(history.length
    ? history.map((entry) => el('li', {},
      el('span', { className: 'role', text: orDash(entry.role) }),
      typeof entry.at === 'number' ? el('span', { className: 'meta', text: ` · ${dateTime(entry.at)}` }) : null,
      el('pre', { text: entryText(entry) })))
    : [el('li', { className: 'none', text: 'none' })]));
  $('history-title').focus();
}

/** A history entry's body (the store keeps `{role, body, at}`; a body is text or the protocol's JSON). */
function entryText(entry) {
  return typeof entry.body === 'string' ? entry.body : JSON.stringify(entry.body ?? null, null, 2);
}

/**
 * Today's model use against its limits: `llm.tokens_per_day` is each plugin's
 * own, `llm.tokens_per_day_per_caller` each caller's (docs/console.md), so
 * every row has its own bar.
 */
function showUsage(usage) {
  const perPlugin = (usage && usage.per_plugin) || [];
  const perCaller = (usage && usage.per_caller) || [];
  $('usage-text').textContent = usage
    ? `UTC day. Each plugin may use ${number(usage.tokens_per_day)} tokens a day, `
      + `each caller ${number(usage.tokens_per_day_per_caller)}.`
    : 'none';
  $('usage-plugins').replaceChildren(...usageRows(perPlugin, usage && usage.tokens_per_day));
  $('usage-callers').replaceChildren(...usageRows(perCaller, usage && usage.tokens_per_day_per_caller));
}

function usageRows(rows, limit) {
  if (!rows.length) return [el('tr', {}, el('td', { className: 'empty-row', text: 'none', attrs: { colspan: 3 } }))];
  return rows.map((row) => el('tr', { attrs: { 'data-name': row.name } },
    el('td', {}, el('code', { text: row.name })),
    el('td', { className: 'num', text: number(row.tokens) }),
    el('td', {}, usageBar(row, limit))));
}

function usageBar(row, limit) {
  if (typeof limit !== 'number' || limit <= 0) return '–';
  const percent = (row.tokens / limit) * 100;
  const fill = el('span', { className: 'fill' });
  fill.style.width = `${Math.min(100, percent)}%`; // the CSSOM: the CSP refuses style attributes
  const bar = el('span', {
    className: 'bar',
    attrs: {
      role: 'progressbar', 'aria-label': `${row.name}: tokens of its day`,
      'aria-valuemin': 0, 'aria-valuemax': 100, 'aria-valuenow': Math.min(100, Math.round(percent)),
      'aria-valuetext': `${number(row.tokens)} of ${number(limit)} tokens`, 'data-over': String(row.tokens >= limit),
    },
  }, fill);
  return el('span', { className: 'usage-cell' }, bar, el('span', { className: 'meta', text: `${percent.toFixed(1)}%` }));
}

// --- Log ---

function onLog(reply) {
  state.log = reply.entries || [];
  showLog();
}

const fieldsText = (fields) => Object.entries(fields || {})
  .map(([key, value]) => `${key}=${typeof value === 'string' ? value : JSON.stringify(value)}`)
  .join(' ');

function showLog() {
  const level = $('log-level').value;
  const needle = $('log-text').value.trim().toLowerCase();
  const shown = state.log.filter((entry) => (!level || entry.level === level)
    && (!needle || `${entry.target} ${entry.message} ${fieldsText(entry.fields)}`.toLowerCase().includes(needle)));
  // Newest first: the last thing that went wrong is what the operator came for.
  const rows = shown.slice().reverse().map((entry) => el('tr', { attrs: { 'data-level': entry.level, 'data-seq': entry.seq } },
    el('td', { className: 'num', text: clock(entry.at_ms) }),
    el('td', {}, el('span', { className: `level level-${entry.level}`, text: entry.level })),
    el('td', {}, el('code', { text: entry.target })),
    el('td', { className: 'message', text: entry.message }),
    el('td', { className: 'fields', text: fieldsText(entry.fields) })));
  $('log-body').replaceChildren(...(rows.length
    ? rows
    : [el('tr', {}, el('td', { className: 'empty-row', text: 'none', attrs: { colspan: 5 } }))]));
  $('log-count').textContent = `${shown.length} of ${state.log.length} entries`;
}

// --- Fleet ---

function onFleet(fleet) {
  state.fleet = fleet;
  showFleet();
}

/** What sets a node apart from the fleet's plugin set, in words; empty when nothing does. */
function differences(row) {
  const parts = [];
  if (row.other_version) parts.push(`version ${orDash(row.version)}`);
  if (row.missing && row.missing.length) parts.push(`missing ${row.missing.join(', ')}`);
  if (row.other_content && row.other_content.length) parts.push(`other content: ${row.other_content.join(', ')}`);
  if (row.extra && row.extra.length) parts.push(`not in the set: ${row.extra.join(', ')}`);
  for (const failing of row.failing || []) parts.push(`${failing.file} failed: ${failing.error}`);
  return parts.join('; ');
}

function showFleet() {
  const fleet = state.fleet;
  if (!fleet) return;
  if (!fleet.shared) {
    $('fleet-summary').textContent = 'This node keeps its state on its own store: it is a fleet of one. '
      + 'Nodes sharing one PostgreSQL database show here with their plugins.';
    $('fleet-nodes').replaceChildren(el('tr', {}, el('td', { className: 'empty-row', text: 'none', attrs: { colspan: 6 } })));
    $('fleet-set').replaceChildren(el('tr', {}, el('td', { className: 'empty-row', text: 'none', attrs: { colspan: 5 } })));
    return;
  }
  const nodes = fleet.nodes || [];
  const apart = nodes.filter((row) => !row.in_step || row.other_version).length;
  $('fleet-summary').textContent = `${nodes.length} node${nodes.length === 1 ? '' : 's'} heard from in the last 15 s`
    + (apart ? `; ${apart} differ${apart === 1 ? 's' : ''} from the fleet's plugin set or version.` : ', all in step.')
    + (fleet.plugins_follow_fleet ? '' : ' This node serves its own folder (plugins.fleet = false).');
  const rows = nodes.map((row) => {
    const differs = differences(row);
    return el('tr', { attrs: { 'data-in-step': String(!differs) } },
      el('th', { attrs: { scope: 'row' } }, el('code', { text: row.node })),
      el('td', { text: `${orDash(row.status)}${row.store === 'ok' ? '' : ' (store not answering)'}` }),
      el('td', { text: orDash(row.version) }),
      el('td', { className: 'num', text: clock(row.seen_at_ms) }),
      el('td', { className: 'num', text: number(row.plugins) }),
      el('td', { className: differs ? 'differs' : '', text: differs || 'in step' }));
  });
  $('fleet-nodes').replaceChildren(...(rows.length
    ? rows
    : [el('tr', {}, el('td', { className: 'empty-row', text: 'no heartbeat yet', attrs: { colspan: 6 } }))]));
  const set = (fleet.set || []).map((plugin) => el('tr', {},
    el('th', { attrs: { scope: 'row' } }, el('code', { text: plugin.file })),
    el('td', {}, el('code', { text: String(plugin.sha256 || '').slice(0, 12), attrs: { title: plugin.sha256 || '' } })),
    el('td', { className: 'num', text: bytes(plugin.size) }),
    el('td', { text: orDash(plugin.published_by) }),
    el('td', { className: 'num', text: dateTime(plugin.published_at_ms) })));
  $('fleet-set').replaceChildren(...(set.length
    ? set
    : [el('tr', {}, el('td', { className: 'empty-row', text: 'empty', attrs: { colspan: 5 } }))]));
}

// --- Wiring ---

$('signin-form').addEventListener('submit', signIn);
$('sign-out').addEventListener('click', () => signOut('Signed out.', 'note'));
window.addEventListener('hashchange', () => route(requestedView() !== null));
$('log-level').addEventListener('change', showLog);
$('log-text').addEventListener('input', showLog);

$('plugins-body').addEventListener('click', (event) => {
  const button = event.target.closest('button[data-action]');
  if (!button) return;
  const file = button.closest('tr').dataset.file;
  const row = state.plugins.find((p) => fileName(p.file) === file);
  if (!row) return;
  if (button.dataset.action === 'remove') removePlugin(row);
  else showManifest(row, button);
});

$('upload-input').addEventListener('change', async (event) => {
  const input = event.target;
  for (const file of [...input.files]) await upload(file);
  input.value = ''; // the same file may be chosen again
});

const zone = $('drop-zone');
zone.addEventListener('dragover', (event) => {
  event.preventDefault();
  zone.dataset.over = 'true';
});
zone.addEventListener('dragleave', () => { zone.dataset.over = 'false'; });
zone.addEventListener('drop', async (event) => {
  event.preventDefault();
  zone.dataset.over = 'false';
  for (const file of [...(event.dataTransfer ? event.dataTransfer.files : [])]) await upload(file);
});

document.querySelector('.activity-lists').addEventListener('click', (event) => {
  const button = event.target.closest('button[data-kind]');
  if (button) openHistory(button);
});

$('manifest-close').addEventListener('click', () => $('manifest-dialog').close());
$('manifest-dialog').addEventListener('close', () => {
  const opener = $('manifest-dialog').returnFocus;
  if (opener && opener.isConnected) opener.focus();
});

if (token) enterConsole();
else $('token').focus();
