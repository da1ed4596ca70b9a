// The console's Fleet view (host/web/console/) in Debian's chromium, against
// node A of a two-node fleet on one PostgreSQL (tests/e2e/console_page.rs runs
// it): both nodes are listed with their heartbeat; node B, which serves its
// own folder (plugins.fleet = false) with another build of the set's plugin,
// stands out and says how it differs; the set's file is listed. axe-core finds
// nothing serious or critical at desktop and phone width; both are
// photographed into SHOTS_DIR.
// Environment: HAI_URL (node A), CONSOLE_TOKEN, FLEET_NODES (how many nodes),
// DIFFERING_FILE (the file node B serves another build of), SHOTS_DIR.
import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import { DESKTOP, checkConsoleView, launch, nodeUrl } from './support.mjs';

const consoleUrl = new URL('console/', nodeUrl()).href;
const token = process.env.CONSOLE_TOKEN;
const nodes = Number(process.env.FLEET_NODES);
const differing = process.env.DIFFERING_FILE;
const shots = process.env.SHOTS_DIR || 'console-shots';
assert.ok(token && nodes > 1 && differing, 'set CONSOLE_TOKEN, FLEET_NODES and DIFFERING_FILE');
/** Heartbeats come every 5 s and the page hears of them with the next series point. */
const HEARTBEAT_PATIENCE = 30000;

const browser = await launch();
try {
  await mkdir(shots, { recursive: true });
  const page = await (await browser.newContext({ viewport: DESKTOP })).newPage();
  page.on('console', (m) => { if (m.type() === 'error') console.log('[console]', m.text()); });
  await page.goto(consoleUrl);
  await page.fill('#token', token);
  await page.press('#token', 'Enter');
  await page.locator('#view-overview').waitFor();

  await page.click('nav a[data-view="fleet"]');
  const rows = page.locator('#fleet-nodes tr');
  await page.waitForFunction((count) => document.querySelectorAll('#fleet-nodes tr th code').length === count,
    nodes, { timeout: HEARTBEAT_PATIENCE });
  const apart = rows.filter({ has: page.locator('td.differs') });
  await apart.filter({ hasText: `other content: ${differing}` }).waitFor({ timeout: HEARTBEAT_PATIENCE });
  assert.equal(await apart.count(), 1, 'exactly one node differs');
  assert.equal(await page.locator('#fleet-nodes tr[data-in-step="true"]').count(), nodes - 1);
  assert.match(await page.locator('#fleet-summary').innerText(), new RegExp(`${nodes} nodes.*1 differs`));
  assert.equal(await page.locator('#fleet-set tr th code').filter({ hasText: differing }).count(), 1);
  await checkConsoleView(page, 'fleet', shots);
  console.log('browser test passed');
} finally {
  await browser.close();
}
