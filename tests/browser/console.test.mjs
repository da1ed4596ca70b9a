// Drives the operator's console page (host/web/console/) in Debian's chromium
// with playwright-core, against a node with the console token, the
// hai-assistant and inspection-tools (tests/e2e/console_page.rs runs it):
//  1. without the token the page is the sign-in and asks the node for nothing;
//     a wrong token is refused on the page, the right one opens the overview;
//  2–4. a report waiting for approval from HAI (the chat page in another tab),
//     A2A and MCP (from node.js here) shows in the console's queue, is approved
//     there, and each client gets the tool's result;
//  5. a .wasm uploaded through the page's file input loads, shows in the table
//     and answers its protocol; a file that is not wasm under the same name
//     shows the compiler's reason and the old version keeps answering;
//  6. the transport's chart counts a burst of requests;
//  7–8. axe-core finds nothing serious or critical on any view, at desktop and
//     phone width, and every view is photographed at both into SHOTS_DIR;
//  then Remove, a refused (stale) token and Sign out.
// Environment: HAI_URL (the node), CONSOLE_TOKEN, UPLOAD_WASM (a plugin),
// UPLOAD_PROTOCOL (the protocol document it serves), BROKEN_WASM (not wasm,
// same file name as UPLOAD_WASM), SHOTS_DIR.
import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import { mkdir, readFile } from 'node:fs/promises';
import { basename } from 'node:path';
import { DESKTOP, assertVendored, checkConsoleView, launch, nodeUrl, say } from './support.mjs';

const base = nodeUrl();
const consoleUrl = new URL('console/', base).href;
const apiPath = new URL('api/', consoleUrl).pathname;
const token = required('CONSOLE_TOKEN');
const uploadWasm = required('UPLOAD_WASM');
const uploadProtocol = required('UPLOAD_PROTOCOL');
const brokenWasm = required('BROKEN_WASM');
const shots = process.env.SHOTS_DIR || 'console-shots';
assert.equal(basename(brokenWasm), basename(uploadWasm), 'the broken file replaces the uploaded one');
const uploadedStem = basename(uploadWasm, '.wasm');

/** How long something the page or a client should show soon may take; a bound, not a target. */
const PATIENCE = 5000;
/** The node sends a series event every 5 s: a change shows within two of them. */
const SERIES_PATIENCE = 15000;
/** Compiling an uploaded plugin on a machine busy with builds. */
const COMPILE_PATIENCE = 30000;

function required(name) {
  const value = process.env[name];
  if (!value) throw new Error(`set ${name} (tests/e2e/console_page.rs does)`);
  return value;
}

const browser = await launch();

/** What the browser refused under a page's content security policy. */
const refusedByPolicy = [];

/** Echo the page's own errors, as the HAI tests do, and keep its policy refusals. */
function watchErrors(page, label) {
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    console.log(`[${label}]`, m.text());
    if (/Content Security Policy/i.test(m.text())) refusedByPolicy.push(`${label}: ${m.text()}`);
  });
  page.on('pageerror', (e) => console.log(`[${label} error]`, e.message));
}

/** A promise's value, or a failure naming what did not happen within `ms`. */
async function within(ms, what, promise) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Ask `check` again every 50 ms until it returns something, for at most `ms`. */
async function eventually(ms, what, check) {
  const until = Date.now() + ms;
  for (let round = 0; round < 1000; round += 1) {
    const value = await check();
    if (value) return value;
    if (Date.now() > until) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`${what}: not within ${ms} ms`);
}

// --- The protocols' clients (node.js: no browser needed to play them) ---

async function postJson(path, body, headers = {}) {
  return fetch(new URL(path, base), {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
}

async function a2a(method, params) {
  const reply = await postJson('a2a', { jsonrpc: '2.0', id: randomUUID(), method, params }, { 'A2A-Version': '1.0' });
  assert.equal(reply.status, 200, `${method}: HTTP ${reply.status}`);
  const answer = await reply.json();
  assert.equal(answer.error, undefined, `${method}: ${JSON.stringify(answer.error)}`);
  return answer.result;
}

/** An Agora single-round request: the node's reply as JSON. */
async function agora(request) {
  const reply = await postJson('agora', request);
  assert.equal(reply.status, 200, `agora: HTTP ${reply.status}`);
  return reply.json();
}

/** A console GET from node.js, with the token: its JSON. */
async function consoleApi(route) {
  const reply = await fetch(new URL(`api/${route}`, consoleUrl), { headers: { authorization: `Bearer ${token}` } });
  assert.equal(reply.status, 200, `api/${route}`);
  return reply.json();
}

const MCP_HEADERS = { accept: 'application/json, text/event-stream' };

async function mcpSession() {
  const initialized = await postJson('mcp', {
    jsonrpc: '2.0', id: 0, method: 'initialize', params: {
      protocolVersion: '2025-11-25',
      capabilities: { elicitation: { form: {} } },
      clientInfo: { name: 'console-browser-test', version: '0' },
    },
  }, MCP_HEADERS);
  assert.equal(initialized.status, 200, 'MCP initialize');
  const session = initialized.headers.get('mcp-session-id');
  assert.ok(session, 'an MCP session id');
  await initialized.text();
  const notified = await postJson('mcp', { jsonrpc: '2.0', method: 'notifications/initialized' },
    { ...MCP_HEADERS, 'mcp-session-id': session });
  assert.equal(notified.status, 202, 'notifications/initialized');
  await notified.text();
  return session;
}

/** A response body read to its end, as text, while the test goes on. */
async function readAll(body) {
  const decoder = new TextDecoder();
  let text = '';
  for await (const chunk of body) text += decoder.decode(chunk, { stream: true });
  return text + decoder.decode();
}

// --- The page ---

/** Show `view` (unless it is the sign-in), check it and photograph it into SHOTS_DIR. */
const checkView = (page, view) => checkConsoleView(page, view, shots);

async function approveInConsole(page, approvalId, feedback) {
  const card = page.locator(`[data-approval-id="${approvalId}"]`);
  if (feedback) await card.locator('textarea.feedback').fill(feedback);
  await card.locator('button.approve').click();
  await card.waitFor({ state: 'detached', timeout: PATIENCE });
}

try {
  await mkdir(shots, { recursive: true });
  // 0. The vendored charting library the node serves is the pinned npm package.
  await assertVendored(consoleUrl, [
    ['vendor/uPlot.iife.min.js', 'uplot/dist/uPlot.iife.min.js'],
    ['vendor/uPlot.min.css', 'uplot/dist/uPlot.min.css'],
  ]);

  const context = await browser.newContext({ viewport: DESKTOP });
  const page = await context.newPage();
  watchErrors(page, 'console');
  const apiCalls = [];
  page.on('request', (request) => {
    const url = new URL(request.url());
    if (url.pathname.startsWith(apiPath)) apiCalls.push(`${request.method()} ${url.pathname.slice(apiPath.length)}`);
  });

  // 1. Without the token: the sign-in and nothing else, and no question to the node.
  const loaded = await page.goto(consoleUrl);
  assert.match(loaded.headers()['content-security-policy'] || '', /style-src 'self'/);
  await page.waitForLoadState('networkidle');
  assert.ok(await page.locator('#token').isVisible());
  assert.equal(await page.getAttribute('#token', 'autocomplete'), 'off');
  assert.equal(await page.locator('label[for="token"]').innerText(), 'Console token');
  assert.ok(await page.locator('#nav').isHidden(), 'no navigation before sign-in');
  assert.ok(await page.locator('#session-controls').isHidden());
  assert.equal(await page.locator('.view[data-view]:visible').count(), 0, 'no view before sign-in');
  assert.equal(await page.locator('.transport, #plugins-body tr, [data-approval-id], #log-body tr').count(), 0);
  assert.deepEqual(apiCalls, [], 'nothing asked of the node before sign-in');
  await checkView(page, 'signin');

  await page.fill('#token', 'not-the-console-token');
  await page.click('#sign-in');
  await page.locator('#signin-error').filter({ hasText: /not accepted/ }).waitFor({ timeout: PATIENCE });
  assert.ok(await page.locator('#nav').isHidden(), 'a wrong token stays on the sign-in');
  assert.deepEqual(apiCalls, ['GET overview'], 'only the sign-in check');
  assert.equal(await page.evaluate(() => sessionStorage.getItem('agora-console-token')), null);

  await page.fill('#token', token);
  await page.press('#token', 'Enter');
  await page.locator('#view-overview').waitFor({ timeout: PATIENCE });
  await page.locator('#live[data-state="live"]').waitFor({ timeout: PATIENCE });
  assert.equal(await page.evaluate(() => sessionStorage.getItem('agora-console-token')), token);
  assert.equal(await page.evaluate(() => document.cookie), '', 'no cookie carries the token');
  assert.ok(await page.locator('#signin-form').isHidden());
  await page.locator('.transport[data-name="a2a"]').waitFor({ timeout: PATIENCE });
  assert.match(await page.locator('#ov-store').innerText(), /answering/);
  assert.match(await page.locator('.transport[data-name="a2a"] .endpoint').innerText(), /127\.0\.0\.1:\d+\/a2a/);
  const live = apiCalls.filter((call) => call !== 'GET overview');
  assert.deepEqual([...new Set(live)], ['GET events'], `one live stream, no polling: ${live}`);

  // 2. HAI: the chat in another tab asks for a report; the console answers.
  const chatContext = await browser.newContext({ viewport: { width: 1100, height: 760 } });
  const chat = await chatContext.newPage();
  watchErrors(chat, 'chat');
  await chat.goto(base);
  await chat.waitForSelector('#connection[data-state="connected"]');
  await page.click('nav a[data-view="approvals"]');
  await say(chat, 'generate the report for INS-2024-001');
  const asked = chat.locator('.card.approval[data-status="pending"]');
  await asked.waitFor({ timeout: PATIENCE });
  const haiApproval = await asked.getAttribute('data-approval-id');
  const haiCard = page.locator(`[data-approval-id="${haiApproval}"]`);
  await haiCard.waitFor({ timeout: PATIENCE });
  assert.equal(await haiCard.getAttribute('data-transport'), 'hai');
  assert.equal(await haiCard.getAttribute('data-risk'), 'high');
  assert.match(await haiCard.locator('h3').innerText(), /generate_inspection_report/);
  assert.match(await haiCard.locator('pre.arguments').innerText(), /"inspection_id": "INS-2024-001"/);
  assert.match(await haiCard.locator('.deadline').innerText(), /^in \d+:\d\d/);
  assert.equal(await page.locator('#approvals-badge').getAttribute('data-count'), '1');
  await checkView(page, 'approvals'); // with the card on screen
  await approveInConsole(page, haiApproval, 'Approved from the console');
  const done = chat.locator('.card[data-tool="generate_inspection_report"][data-status="completed"] .card-result');
  await done.filter({ hasText: /RPT-2024-001-/ }).waitFor({ timeout: PATIENCE });
  assert.equal(await page.locator('#approvals-badge').getAttribute('data-count'), '0');
  const haiSession = await chat.evaluate(() => localStorage.getItem('agora_session_id'));

  // 3. A2A: the task waits in input-required, the console approves, the task completes.
  const sent = await a2a('SendMessage', {
    message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text: 'generate the report for INS-2024-001' }] },
  });
  assert.equal(sent.task.status.state, 'TASK_STATE_INPUT_REQUIRED', JSON.stringify(sent));
  const a2aApproval = sent.task.status.message.parts.find((part) => part.data && part.data.approval_id).data.approval_id;
  await page.locator(`[data-approval-id="${a2aApproval}"][data-transport="a2a"]`).waitFor({ timeout: PATIENCE });
  await approveInConsole(page, a2aApproval);
  const task = await eventually(PATIENCE, 'the A2A task to end', async () => {
    const current = await a2a('GetTask', { id: sent.task.id });
    return ['TASK_STATE_WORKING', 'TASK_STATE_INPUT_REQUIRED'].includes(current.status.state) ? null : current;
  });
  assert.equal(task.status.state, 'TASK_STATE_COMPLETED', JSON.stringify(task.status));
  const artifact = task.artifacts[0].parts.map((part) => part.text || '').join('');
  assert.match(artifact, /RPT-2024-001-/);

  // 4. MCP: the call streams an elicitation to its client and waits; the console releases it.
  const mcp = await mcpSession();
  const call = await postJson('mcp', {
    jsonrpc: '2.0', id: 7, method: 'tools/call',
    params: { name: 'generate_inspection_report', arguments: { inspection_id: 'INS-2024-001' } },
  }, { ...MCP_HEADERS, 'mcp-session-id': mcp });
  assert.equal(call.status, 200, 'tools/call');
  const streamed = readAll(call.body);
  const mcpCard = page.locator('[data-approval-id][data-transport="mcp"]');
  await mcpCard.waitFor({ timeout: PATIENCE });
  assert.equal(await mcpCard.locator('dd code').first().innerText(), `mcp:${mcp}`);
  await approveInConsole(page, await mcpCard.getAttribute('data-approval-id'));
  const stream = await within(PATIENCE, "the MCP call's stream to end", streamed);
  assert.match(stream, /elicitation\/create/, 'the client was asked too');
  assert.match(stream, /RPT-2024-001-/, stream);
  assert.doesNotMatch(stream, /"isError":\s*true/, stream);

  // 5. Upload through the file input: the plugin loads, shows, and answers its protocol.
  await page.click('nav a[data-view="plugins"]');
  await page.locator('#plugins-body tr[data-plugin="hai-assistant"]').waitFor({ timeout: PATIENCE });
  const putPath = `${apiPath}plugins/${uploadedStem}`;
  const isPut = (response) => response.request().method() === 'PUT' && new URL(response.url()).pathname === putPath;
  let put = page.waitForResponse(isPut);
  await page.setInputFiles('#upload-input', uploadWasm);
  // 202: still compiling when the node answered; the page then follows the plugins events.
  const accepted = (await put).status();
  assert.ok([200, 202].includes(accepted), `the upload: HTTP ${accepted}`);
  await page.locator('#upload-result[data-outcome="loaded"]').waitFor({ timeout: COMPILE_PATIENCE });
  const uploaded = page.locator('#plugins-body tr[data-plugin="unit-converter"]');
  await uploaded.locator('[data-state="loaded"]').waitFor({ timeout: PATIENCE });
  assert.match(await uploaded.innerText(), /convert_units/);
  const protocol = await readFile(uploadProtocol, 'utf8');
  const hash = createHash('sha1').update(protocol).digest('hex');
  const convert = { protocolHash: hash, body: { value: 100, from: 'C', to: 'F' } };
  let converted = await agora(convert);
  assert.equal(converted.status, 'success', JSON.stringify(converted));
  assert.equal(converted.body.value, 212);

  // Its manifest and protocol document, from the row, in a dialog that Escape closes.
  const manifestButton = uploaded.locator('button[data-action="manifest"]');
  await manifestButton.click();
  const served = page.locator(`#manifest-protocols pre[data-hash="${hash}"]`);
  await served.waitFor({ timeout: PATIENCE });
  assert.equal(await served.textContent(), protocol);
  assert.match(await page.locator('#manifest-json').textContent(), /"unit-converter"/);
  await page.keyboard.press('Escape');
  await page.locator('#manifest-dialog').waitFor({ state: 'hidden' });
  assert.equal(await page.evaluate(() => document.activeElement.dataset.action), 'manifest');

  // Not wasm, under the same name: the compiler's reason shows, the old version keeps answering.
  put = page.waitForResponse(isPut);
  await page.setInputFiles('#upload-input', brokenWasm);
  assert.equal((await put).status(), 422, 'the broken upload');
  // The reason, as the node's plugin table has it (the page's own answer is not read back from the browser).
  const rows = (await consoleApi('plugins')).plugins;
  const reason = rows.find((row) => basename(row.file) === basename(brokenWasm)).error;
  assert.match(reason || '', /magic header|not a valid/, 'the node says why');
  const result = page.locator('#upload-result[data-outcome="failed"]');
  await result.waitFor({ timeout: PATIENCE });
  const shown = await result.textContent();
  assert.ok(shown.includes(reason), `${shown} shows ${reason}`);
  assert.equal(await uploaded.locator('td[data-state]').getAttribute('data-state'), 'loaded');
  converted = await agora(convert);
  assert.equal(converted.body.value, 212, 'the old version still answers');

  // 6. The charts count a burst of requests at the next series event.
  await page.click('nav a[data-view="overview"]');
  const agoraChart = page.locator('.chart[data-transport="agora"]');
  await agoraChart.waitFor();
  assert.equal(await agoraChart.locator('canvas').count(), 2, 'two uPlot charts');
  const before = Number(await agoraChart.getAttribute('data-requests'));
  const BURST = 50;
  for (let batch = 0; batch < BURST / 10; batch += 1) {
    await Promise.all(Array.from({ length: 10 }, () => agora(convert)));
  }
  await page.waitForFunction((wanted) => {
    const chart = document.querySelector('.chart[data-transport="agora"]');
    return Number(chart.dataset.requests) >= wanted;
  }, before + BURST, { timeout: SERIES_PATIENCE });
  assert.ok(Number(await agoraChart.getAttribute('data-points')) > 0);
  assert.match(await agoraChart.locator('figcaption').innerText(), /requests\/s.*p99/s);

  // 7–8. Every view: accessible and photographed, at desktop and phone width.
  await checkView(page, 'overview');
  await checkView(page, 'plugins');
  await page.click('nav a[data-view="activity"]');
  const usage = (await consoleApi('activity')).model_usage;
  await page.locator('#usage-text').filter({ hasText: `each caller ${usage.tokens_per_day_per_caller.toLocaleString('en')}` })
    .waitFor({ timeout: PATIENCE });
  for (const [list, rows] of [['usage-plugins', usage.per_plugin], ['usage-callers', usage.per_caller]]) {
    const names = await page.locator(`#${list} tr[data-name]`).evaluateAll((trs) => trs.map((tr) => tr.dataset.name));
    assert.deepEqual(names, rows.map((row) => row.name), list);
  }
  // The HAI session, the A2A task and the MCP session of steps 2–4, each opening its history.
  const session = page.locator(`#act-hai button[data-id="${haiSession}"]`);
  await session.waitFor({ timeout: SERIES_PATIENCE });
  await page.locator(`#act-mcp button[data-id="${mcp}"]`).waitFor({ timeout: SERIES_PATIENCE });
  const taskItem = page.locator(`#act-a2a button[data-id="${sent.task.id}"]`);
  await taskItem.waitFor({ timeout: SERIES_PATIENCE });
  assert.match(await taskItem.innerText(), /completed/);
  await session.click();
  await page.locator('#history-list pre').filter({ hasText: /INS-2024-001/ }).first().waitFor({ timeout: PATIENCE });
  assert.match(await page.locator('#history-title').innerText(), new RegExp(haiSession));
  assert.equal(await session.getAttribute('aria-pressed'), 'true');
  await checkView(page, 'activity');
  await page.click('nav a[data-view="log"]');
  await page.locator('#log-body tr[data-level]').first().waitFor({ timeout: PATIENCE });
  await page.selectOption('#log-level', 'WARN');
  const levels = await page.locator('#log-body tr[data-level]').evaluateAll((rows) => rows.map((r) => r.dataset.level));
  assert.ok(levels.every((level) => level === 'WARN'), `only warnings: ${levels}`);
  await page.selectOption('#log-level', '');
  await page.fill('#log-text', 'no entry says this 4f1c');
  assert.equal(await page.locator('#log-body tr[data-level]').count(), 0);
  await page.fill('#log-text', '');
  await checkView(page, 'log');

  // Remove, after a confirmation: the row goes and the protocol is no longer served.
  await page.click('nav a[data-view="plugins"]');
  page.once('dialog', (dialog) => dialog.accept());
  await uploaded.locator('button[data-action="remove"]').click();
  await uploaded.waitFor({ state: 'detached', timeout: PATIENCE });
  await page.locator('#upload-result[data-outcome="removed"]').waitFor();
  converted = await eventually(PATIENCE, 'the removed plugin to stop answering', async () => {
    const reply = await agora(convert);
    return reply.status === 'success' ? null : reply;
  });
  assert.equal(converted.error, 'Unsupported protocol', JSON.stringify(converted));

  // A token the node no longer takes drops back to the sign-in; Sign out forgets it.
  await page.evaluate(() => sessionStorage.setItem('agora-console-token', 'a-stale-token'));
  await page.reload();
  await page.locator('#signin-error').filter({ hasText: /refused/ }).waitFor({ timeout: PATIENCE });
  assert.ok(await page.locator('#nav').isHidden());
  assert.equal(await page.evaluate(() => sessionStorage.getItem('agora-console-token')), null);
  await page.fill('#token', token);
  await page.click('#sign-in');
  await page.locator('#live[data-state="live"]').waitFor({ timeout: PATIENCE });
  await page.click('#sign-out');
  await page.locator('#token').waitFor();
  assert.ok(await page.locator('#nav').isHidden());
  assert.equal(await page.locator('.view[data-view]:visible').count(), 0);
  assert.equal(await page.evaluate(() => sessionStorage.getItem('agora-console-token')), null);
  assert.equal(await page.locator('.transport, #plugins-body tr, [data-approval-id], #log-body tr').count(), 0, 'its data went too');

  assert.deepEqual(refusedByPolicy, [], 'nothing on the pages breaks their content security policy');
  console.log('browser test passed');
} finally {
  await browser.close();
}
