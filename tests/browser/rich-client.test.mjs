// Drives the HAI browser client over a node whose assistant is the
// fixture-rich-assistant (tests/fixtures/rich-assistant): answers in markdown
// are rendered and sanitised, tool calls and approvals are cards, the log does
// not yank a reader who scrolled up, a rate-limited message gets a retry
// button that honours retry_after_ms, and axe-core finds no WCAG 2 A/AA
// violation on a page showing all of it. The node must allow at most
// RATE_LIMIT (4) messages per minute per session (tests/e2e/hai.rs sets it).
// Writes SCREENSHOT (default ./screenshot-rich.png).
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { answer, assertVendored, finals, launch, nodeUrl, openChat, say } from './support.mjs';

const RATE_LIMIT = 4;
const url = nodeUrl();
const screenshot = process.env.SCREENSHOT || 'screenshot-rich.png';
const browser = await launch();

/** axe-core's WCAG 2.0/2.1 A and AA rules over the whole page; the violations, readable. */
async function axeViolations(page) {
  const source = await readFile(new URL('node_modules/axe-core/axe.min.js', import.meta.url), 'utf8');
  // Evaluated, not a <script> tag: the node's CSP (rightly) refuses inline scripts.
  await page.evaluate(source);
  const results = await page.evaluate(() => window.axe.run(document, {
    runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'] },
  }));
  return results.violations.map((v) => `${v.id}: ${v.help} — ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`);
}

try {
  // 0. The vendored renderer and sanitiser the node serves are the pinned npm packages.
  await assertVendored(url, [
    ['vendor/marked.esm.js', 'marked/lib/marked.esm.js'],
    ['vendor/purify.min.js', 'dompurify/dist/purify.min.js'],
  ]);

  const { page } = await openChat(browser, url);

  // 1. More than a screenful, so that later there is somewhere to scroll back to.
  await say(page, 'long 30');
  await answer(page, 1);

  // 2. Markdown, streamed in 7-character chunks that cut through the markup: the
  //    list grows item by item while the answer streams, and ends as real elements.
  await page.evaluate(() => {
    window.__items = [];
    new MutationObserver(() => {
      const answers = document.querySelectorAll('.msg.assistant');
      if (answers.length === 2) window.__items.push(answers[1].querySelectorAll('li').length);
    }).observe(document.getElementById('messages'), { childList: true, subtree: true, characterData: true });
  });
  await say(page, 'markdown');
  await answer(page, 2);
  const md = finals(page).nth(1);
  assert.equal(await md.locator('h2').innerText(), 'Storage rules');
  assert.equal(await md.locator('em').innerText(), 'chilled');
  assert.equal(await md.locator('strong').innerText(), '7 °C or below');
  assert.equal(await md.locator('ul > li').count(), 3);
  assert.equal(await md.locator('p code').innerText(), 'FS-101');
  assert.match(await md.locator('pre > code').innerText(), /discard\(batch\);/);
  const links = md.locator('a');
  assert.equal(await links.count(), 1, 'only the https link is a link');
  assert.equal(await links.getAttribute('href'), 'https://example.org/fs-101');
  assert.equal(await links.getAttribute('rel'), 'noopener noreferrer');
  assert.match(await md.innerText(), /or this\./, 'the javascript: link keeps its words');
  assert.doesNotMatch(await md.innerText(), /\*\*|```|##/);
  const items = await page.evaluate(() => [...new Set(window.__items)]);
  assert.deepEqual(items.filter((n) => n > 0), [1, 2, 3], `the list grew while streaming: ${items}`);

  // 3. HTML in an answer is shown as text: nothing runs, no element is made.
  await say(page, 'hostile');
  await answer(page, 3);
  const hostile = finals(page).nth(2);
  assert.equal(await page.locator('#messages :is(script, img, iframe, b, [onerror], [onmouseover])').count(), 0);
  assert.match(await hostile.innerText(), /<script>window.__pwned='script'<\/script>/);
  assert.match(await hostile.innerText(), /<img src=x onerror=/);
  assert.match(await hostile.innerText(), /tracker/);
  await page.waitForTimeout(300); // an onerror would have fired by now
  assert.equal(await page.evaluate(() => window.__pwned), undefined);

  // 4. Tool cards: a search that completes, one that fails, and a report waiting
  //    for approval.
  await say(page, 'tools');
  const approval = page.locator('.card.approval');
  await page.waitForSelector('.card.approval[data-status="pending"]');
  const found = page.locator('.card[data-tool="search_regulations"][data-status="completed"]');
  const failed = page.locator('.card[data-tool="search_regulations"][data-status="failed"]');
  assert.equal(await found.count(), 1);
  assert.equal(await failed.count(), 1);
  assert.match(await found.innerText(), /Completed/);
  assert.match(await failed.locator('.card-result').innerText(), /query|empty|blank/i);
  assert.equal(await found.locator('details').evaluate((d) => d.open), false, 'parameters start folded');
  await found.locator('summary').click();
  assert.match(await found.locator('details pre').innerText(), /"query": "food storage"/);
  // The card carries the failure: no second notice repeats it.
  assert.equal(await page.locator('.notice.error[data-code="tool_execution_failed"]').count(), 0);
  assert.match(await approval.innerText(), /Waiting for your approval/);
  assert.match(await approval.locator('.reasoning').innerText(), /the report records them/);
  assert.match(await approval.locator('details pre').innerText(), /INS-2024-007/);
  assert.ok(await approval.locator('button.approve').isEnabled());

  // 5. Accessibility of the page with all of it on screen (a tall window, so the
  //    screenshot shows the answers and the cards too).
  await found.locator('summary').click(); // folded again, as it came
  await page.setViewportSize({ width: 1100, height: 1260 });
  await page.locator('#messages').evaluate((el) => { el.scrollTop = el.scrollHeight; });
  const violations = await axeViolations(page);
  assert.deepEqual(violations, [], `axe-core found WCAG A/AA violations:\n${violations.join('\n')}`);
  await page.screenshot({ path: screenshot });
  await page.setViewportSize({ width: 1100, height: 760 });
  // Keyboard focus is visible: Tab from the feedback box to Reject draws the focus ring.
  await approval.locator('textarea.feedback').focus();
  await page.keyboard.press('Tab');
  const ring = await page.evaluate(() => {
    const el = document.activeElement;
    const style = getComputedStyle(el);
    return `${el.className} ${style.outlineStyle} ${style.outlineWidth}`;
  });
  assert.equal(ring, 'reject solid 3px');

  // 6. A reader scrolled up is not yanked down: approve by keyboard without
  //    moving, the answer arrives below, and a "New messages" button appears.
  const log = page.locator('#messages');
  assert.ok(await page.locator('#new-messages').isHidden());
  await log.evaluate((el) => { el.scrollTop = 0; });
  await approval.locator('button.approve').evaluate((b) => b.focus({ preventScroll: true }));
  await page.keyboard.press('Enter');
  await answer(page, 4);
  await page.waitForSelector('.card.approval[data-status="completed"]');
  assert.ok(await approval.locator('button.approve').isDisabled());
  assert.ok(await approval.locator('button.reject').isDisabled());
  assert.ok(await approval.locator('textarea').isDisabled());
  assert.equal(await log.evaluate((el) => el.scrollTop), 0, 'the log stayed where the reader was');
  await page.locator('#new-messages').click();
  assert.ok(await page.locator('#new-messages').isHidden());
  assert.ok(await log.evaluate((el) => el.scrollHeight - el.scrollTop - el.clientHeight < 2));

  // 7. Rate limited: a fresh session sends its allowance, the next message is
  //    refused with retry_after_ms, and the retry button waits exactly that long.
  const refusals = [];
  page.on('websocket', (ws) => ws.on('framereceived', ({ payload }) => {
    const frame = JSON.parse(String(payload));
    if (frame.type === 'error') refusals.push(frame);
  }));
  const oldSession = await page.evaluate(() => localStorage.getItem('agora_session_id'));
  await page.click('#new-session');
  // The new session is live once the node handed this page its secret.
  await page.waitForFunction((old) => localStorage.getItem('agora_session_id') !== old
    && localStorage.getItem('agora_session_secret'), oldSession);
  await page.waitForSelector('#connection[data-state="connected"]');
  for (let n = 1; n <= RATE_LIMIT; n += 1) {
    await say(page, `message ${n}`);
    assert.match(await answer(page, n), new RegExp(`You said: message ${n}`));
  }
  await say(page, 'one too many');
  const retry = page.locator('.notice.error[data-code="rate_limit_exceeded"] button.retry');
  await retry.waitFor();
  const shownAt = await page.evaluate(() => Date.now());
  await page.evaluate(() => {
    const button = document.querySelector('button.retry');
    new MutationObserver(() => {
      if (!button.disabled && !window.__enabledAt) window.__enabledAt = Date.now();
    }).observe(button, { attributes: true });
  });
  assert.ok(await retry.isDisabled());
  assert.match(await retry.innerText(), /^Retry in \d+ s$/);
  const limited = refusals.find((f) => f.error_code === 'rate_limit_exceeded');
  assert.ok(limited, `a rate_limit_exceeded frame: ${JSON.stringify(refusals)}`);
  const wait = limited.details.retry_after_ms;
  assert.ok(wait > 1000, `retry_after_ms ${wait}`);
  const readyAt = Number(await retry.getAttribute('data-ready-at'));
  assert.ok(Math.abs(readyAt - (shownAt + wait)) < 1000, `ready at ${readyAt}, shown ${shownAt} + ${wait}`);
  // The countdown shows the seconds left (a timer may fire a little late: one second of slack).
  const countdown = () => page.evaluate(() => {
    const button = document.querySelector('button.retry');
    const left = Math.ceil((Number(button.dataset.readyAt) - Date.now()) / 1000);
    return { shown: Number(button.textContent.match(/\d+/)[0]), left };
  });
  const first = await countdown();
  assert.ok(first.shown - first.left <= 1 && first.shown >= first.left, JSON.stringify(first));
  await page.waitForTimeout(2100);
  const later = await countdown();
  assert.ok(later.shown < first.shown && later.shown >= later.left, `counts down: ${JSON.stringify([first, later])}`);
  await page.waitForFunction(() => !document.querySelector('button.retry').disabled, null, { timeout: wait + 30000 });
  const enabledAt = await page.evaluate(() => window.__enabledAt);
  assert.ok(enabledAt >= readyAt, `enabled at ${enabledAt}, before ${readyAt}`);
  assert.equal(await retry.innerText(), 'Retry');
  await retry.click();
  assert.match(await answer(page, RATE_LIMIT + 1), /You said: one too many/);
  assert.equal(await page.locator('.msg.user', { hasText: 'one too many' }).count(), 1);
  assert.ok(await retry.isDisabled());

  console.log('rich browser test passed');
} finally {
  await browser.close();
}
