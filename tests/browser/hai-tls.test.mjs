// The HAI browser client served over https: the page must open its WebSocket
// with wss:// (hai-client.js follows location.protocol) and chat over it.
// Run by tests/e2e/tls_inbound.rs with HAI_URL set to the node's https address;
// the node's certificate comes from a CA the test made, so only this browser is
// told to ignore certificate errors. Writes SCREENSHOT (default ./screenshot-tls.png).
import assert from 'node:assert/strict';
import { answer, launch, nodeUrl, openChat, say } from './support.mjs';

const url = nodeUrl();
assert.match(url, /^https:\/\//);
const screenshot = process.env.SCREENSHOT || 'screenshot-tls.png';
const browser = await launch(['--ignore-certificate-errors']);

try {
  const sockets = [];
  const { page } = await openChat(browser, url, {}, (page) => {
    page.on('websocket', (socket) => sockets.push(socket.url()));
  });
  assert.equal(await page.evaluate(() => location.protocol), 'https:');
  assert.ok(sockets.length >= 1, 'the page opened a WebSocket');
  for (const socket of sockets) assert.match(socket, /^wss:\/\//);

  await say(page, 'Hello over TLS');
  const text = await answer(page, 1);
  assert.match(text, /Hello over TLS/);
  await page.screenshot({ path: screenshot });
  console.log('browser test passed');
} finally {
  await browser.close();
}
