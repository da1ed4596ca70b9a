// What the browser tests share: Debian's chromium through playwright-core,
// talking to the chat the way a person does (type, press Send, wait for the
// answer), and checking a console view (axe-core, widths, screenshots).
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';

import { chromium } from 'playwright-core';

/** Chromium, with `extraArgs` for this one browser only. */
export function launch(extraArgs = []) {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
      ...extraArgs,
    ],
  });
}

/** The node's address from the environment (tests/e2e/hai.rs sets it). */
export function nodeUrl() {
  const url = process.env.HAI_URL;
  if (!url) throw new Error('set HAI_URL to the node, e.g. http://127.0.0.1:8080/');
  return url;
}

export const finals = (page) => page.locator('.msg.assistant[data-final="true"]');

export async function say(page, text) {
  await page.fill('#input', text);
  await page.click('#send');
}

/** The text of the `n`th finished answer (1-based), once it is there. */
export async function answer(page, n) {
  await page.waitForFunction(
    (n) => document.querySelectorAll('.msg.assistant[data-final="true"]').length >= n,
    n,
  );
  return finals(page).nth(n - 1).innerText();
}

/**
 * A page of `browser` on the node, connected, with the page's console errors echoed;
 * `beforeLoad(page)` runs before the page loads (to watch its WebSockets…).
 */
export async function openChat(browser, url, options = {}, beforeLoad = () => {}) {
  const context = await browser.newContext({ viewport: { width: 1100, height: 760 }, ...options });
  const page = await context.newPage();
  beforeLoad(page);
  page.on('console', (m) => { if (m.type() === 'error') console.log('[page]', m.text()); });
  page.on('pageerror', (e) => console.log('[page error]', e.message));
  await page.goto(url);
  await page.waitForSelector('#connection[data-state="connected"]');
  return { context, page };
}

/**
 * Each `[served, pinned]` pair: the file the node serves at `served` (relative to
 * `base`) is byte for byte the npm package's file `pinned` (under node_modules).
 */
export async function assertVendored(base, pairs) {
  for (const [served, pinned] of pairs) {
    const reply = await fetch(new URL(served, base));
    assert.equal(reply.status, 200, served);
    const copy = await readFile(new URL(`node_modules/${pinned}`, import.meta.url), 'utf8');
    assert.equal(await reply.text(), copy, `${served} is not ${pinned}`);
  }
}

// --- The operator's console (console.test.mjs, console-fleet.test.mjs) ---

export const DESKTOP = { width: 1280, height: 800 };
export const PHONE = { width: 390, height: 844 };

let axeSource = null;

/** axe-core's rules over the whole page: the serious and critical violations, readable. */
async function axeViolations(page) {
  axeSource ??= await readFile(new URL('node_modules/axe-core/axe.min.js', import.meta.url), 'utf8');
  // Evaluated, not a <script> tag: the console's CSP (rightly) refuses inline scripts.
  if (!(await page.evaluate(() => Boolean(window.axe)))) await page.evaluate(axeSource);
  const results = await page.evaluate(() => window.axe.run(document));
  return results.violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.impact} ${v.id}: ${v.help} — ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`);
}

const nextFrame = (page) => page.evaluate(() => new Promise((resolve) => {
  requestAnimationFrame(() => requestAnimationFrame(resolve));
}));

/**
 * Show the console's `view` (unless it is the sign-in), check it with axe-core
 * and for sideways scrolling at desktop and phone width, and photograph it
 * into `shots` as console-VIEW-WIDTH.png.
 */
export async function checkConsoleView(page, view, shots) {
  if (view !== 'signin') {
    await page.click(`nav a[data-view="${view}"]`);
    await page.locator(`#view-${view}`).waitFor();
    assert.equal(await page.getAttribute(`nav a[data-view="${view}"]`, 'aria-current'), 'page');
  }
  for (const [label, size] of [['desktop', DESKTOP], ['phone', PHONE]]) {
    await page.setViewportSize(size);
    await nextFrame(page);
    const violations = await axeViolations(page);
    assert.deepEqual(violations, [], `axe-core on ${view} (${label}):\n${violations.join('\n')}`);
    // Nothing wider than the screen: wide tables scroll inside their own frame.
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    assert.ok(overflow <= 0, `${view} (${label}) scrolls sideways by ${overflow} px`);
    await page.screenshot({ path: join(shots, `console-${view}-${label}.png`) });
  }
  await page.setViewportSize(DESKTOP);
}
