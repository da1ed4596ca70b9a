// Drives the node's HAI browser client in Debian's chromium with playwright-core:
// a streamed answer, a tool call, an approved and a rejected report, the
// history after a reload (with the session secret the node issued), and a
// second browser that knows only the session id (the spec's returning client)
// resuming the session: a UUIDv4 id is the session's bearer secret.
// Run by tests/e2e/hai.rs with HAI_URL set; writes SCREENSHOT (default
// ./screenshot.png). rich-client.test.mjs covers markdown, cards, scrolling,
// retry and accessibility.
import assert from 'node:assert/strict';
import { answer, finals, launch, nodeUrl, openChat, say } from './support.mjs';

const url = nodeUrl();
const screenshot = process.env.SCREENSHOT || 'screenshot.png';
const browser = await launch();

try {
  const { page } = await openChat(browser, url);
  const sessionId = await page.evaluate(() => localStorage.getItem('agora_session_id'));
  assert.match(sessionId, /^[0-9a-f-]{36}$/);
  // The node issued the session's secret to the connection that created it.
  await page.waitForFunction(() => localStorage.getItem('agora_session_secret'));
  const secret = await page.evaluate(() => localStorage.getItem('agora_session_secret'));
  assert.match(secret, /^[0-9a-f]{64}$/);

  // 1. A streamed answer: the text grows chunk by chunk in the page.
  await page.evaluate(() => {
    window.__snapshots = [];
    new MutationObserver(() => {
      const el = document.querySelector('.msg.assistant');
      if (el) window.__snapshots.push(el.textContent.length);
    }).observe(document.getElementById('messages'), { childList: true, subtree: true, characterData: true });
  });
  await say(page, 'What are the rules for food storage?');
  let text = await answer(page, 1);
  assert.match(text, /What are the rules for food storage\?/);
  const chunks = Number(await finals(page).nth(0).getAttribute('data-chunks'));
  assert.ok(chunks >= 3, `several chunks, got ${chunks}`);
  const snapshots = await page.evaluate(() => [...new Set(window.__snapshots)]);
  assert.ok(snapshots.length >= 3, `the answer grew progressively: ${snapshots}`);
  await page.waitForSelector('#status', { state: 'hidden' });

  // 2. A low-risk tool: a card with its result, no approval.
  await say(page, 'search food storage');
  text = await answer(page, 2);
  assert.match(text, /FS-10/);
  const tool = page.locator('.tool[data-tool="search_regulations"][data-status="completed"]');
  assert.match(await tool.innerText(), /Found \d+ relevant regulations/);

  // 3. A high-risk tool, approved on its card (an orange stripe for high risk);
  //    the same card then follows the tool to completed.
  await say(page, 'Generate the inspection report for INS-2024-001');
  const approved = page.locator('.card.approval').nth(0);
  await approved.and(page.locator('[data-status="pending"]')).waitFor();
  assert.equal(await approved.getAttribute('data-risk'), 'high');
  assert.equal(await approved.evaluate((el) => getComputedStyle(el).borderLeftColor), 'rgb(232, 113, 10)');
  assert.match(await approved.locator('.risk').innerText(), /high risk/i);
  assert.match(await approved.locator('details pre').innerText(), /INS-2024-001/);
  await approved.locator('button.approve').click();
  text = await answer(page, 3);
  assert.match(text, /has been generated/);
  await page.waitForSelector('.card.approval[data-tool="generate_inspection_report"][data-status="completed"]');
  assert.ok(await approved.locator('button.approve').isDisabled());
  assert.ok(await approved.locator('button.reject').isDisabled());

  // 4. Rejected with feedback: the answer says so and quotes it; the card stays answered.
  await say(page, 'Generate the inspection report for INS-2024-002');
  const rejected = page.locator('.card.approval').nth(1);
  await rejected.and(page.locator('[data-status="pending"]')).waitFor();
  await rejected.locator('textarea.feedback').fill('Please add the freezer photos first');
  await page.screenshot({ path: screenshot });
  await rejected.locator('button.reject').click();
  text = await answer(page, 4);
  assert.match(text, /was not generated/);
  assert.match(text, /Please add the freezer photos first/);
  assert.equal(await rejected.getAttribute('data-status'), 'rejected');
  assert.ok(await rejected.locator('button.approve').isDisabled());
  assert.equal(await page.locator('.card.approval[data-status="pending"]').count(), 0);

  // 5. Reload: same session, the conversation comes back from the node.
  await page.reload();
  await page.waitForSelector('#connection[data-state="connected"]');
  await page.waitForFunction(() => Number(document.body.dataset.history || 0) > 0);
  assert.equal(await page.evaluate(() => localStorage.getItem('agora_session_id')), sessionId);
  assert.equal(await page.locator('.msg.user').count(), 4);
  assert.equal(await finals(page).count(), 4);
  assert.match(
    await page.locator('.card.approval[data-decision="rejected"]').innerText(),
    /Please add the freezer photos first/,
  );
  assert.equal(await page.locator('.card.approval[data-tool="generate_inspection_report"][data-status="completed"]').count(), 1);
  assert.equal(await page.locator('.card.approval button:enabled').count(), 0);
  await say(page, 'what did I say first?');
  text = await answer(page, 5);
  assert.match(text, /What are the rules for food storage\?/);
  assert.equal(await page.evaluate(() => localStorage.getItem('agora_session_secret')), secret);

  // 6. Another browser that knows only the id, as the spec's client after a reload
  //    (it kept its crypto.randomUUID(), never a secret): the id is a UUIDv4, the
  //    session's bearer secret, so it resumes the session with its history.
  const returning = await browser.newContext();
  await returning.addInitScript((id) => {
    if (!sessionStorage.getItem('seeded')) {
      sessionStorage.setItem('seeded', '1');
      localStorage.setItem('agora_session_id', id);
    }
  }, sessionId);
  const other = await returning.newPage();
  await other.goto(url);
  await other.waitForSelector('#connection[data-state="connected"]');
  await other.waitForFunction(() => Number(document.body.dataset.history || 0) > 0);
  assert.equal(await other.evaluate(() => localStorage.getItem('agora_session_id')), sessionId);
  assert.equal(await other.evaluate(() => localStorage.getItem('agora_session_secret')), null);
  assert.equal(await other.locator('.msg.user').count(), 5);
  await say(other, 'what did I say first?');
  text = await answer(other, 6);
  assert.match(text, /What are the rules for food storage\?/);
  await returning.close();

  console.log('browser test passed');
} finally {
  await browser.close();
}
