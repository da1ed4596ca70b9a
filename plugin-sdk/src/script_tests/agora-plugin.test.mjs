// Behaviour of plugin-sdk/bindings/js/agora-plugin.js under Node, with the host
// import stubbed (host-stub.mjs): run by `cargo test -p agora-plugin-sdk`.
import assert from "node:assert/strict";
import { register } from "node:module";

const stub = new URL("./host-stub.mjs", import.meta.url).href;
const hooks = `export async function resolve(specifier, context, next) {
  return specifier === "agora:node/host@0.1.0" ? { url: ${JSON.stringify(stub)}, shortCircuit: true } : next(specifier, context);
}`;
register(`data:text/javascript,${encodeURIComponent(hooks)}`);
const sdk = await import(process.env.AGORA_JS_HELPER);

// A WIT import that fails throws an error carrying the host's string as `payload`.
const refuse = (message) => () => {
  throw Object.assign(new Error("import failed"), { payload: message });
};
const utf8 = new TextEncoder();

// kv: a value over the limit is a "limit", anything unknown is "storage".
globalThis.host = { kvSet: refuse("values are limited to 10 bytes") };
assert.throws(() => sdk.kvSetJson("k", { a: 1 }), (e) => e instanceof sdk.HostError && e.kind === "limit" && e.message === "values are limited to 10 bytes");
globalThis.host = { kvDelete: refuse("IO error: disk full") };
assert.throws(() => sdk.kvDelete("k"), (e) => e.kind === "storage");

// kvGetJson: absent is undefined, invalid JSON is invalid-data, never absent.
globalThis.host = { kvGet: (key) => ({ a: utf8.encode('{"n": 1}'), bad: utf8.encode("{nope"), raw: new Uint8Array([0xff]) })[key] };
assert.deepEqual(sdk.kvGetJson("a"), { n: 1 });
assert.equal(sdk.kvGetJson("missing"), undefined);
for (const key of ["bad", "raw"]) {
  assert.throws(() => sdk.kvGetJson(key), (e) => e.kind === "invalid-data" && e.message.includes(`"${key}"`));
}

// Tools: rejection feedback, timeouts, failures and refusals are told apart.
const toolCases = [
  ["tool t was rejected: not today", { kind: "tool-rejected", feedback: "not today" }],
  ["tool t was rejected", { kind: "tool-rejected", feedback: undefined }],
  ["approval of tool t timed out", { kind: "tool-timed-out", tool: "t" }],
  ["tool t failed: bad arguments: x", { kind: "tool-failed", reason: "bad arguments: x" }],
  ["no tool named \"t\" is loaded", { kind: "tool-refused" }],
  ["tool u failed: boom", { kind: "tool-refused" }],
];
for (const [message, expected] of toolCases) {
  globalThis.host = { callTool: refuse(message) };
  assert.throws(() => sdk.callTool("t", { q: 1 }), (e) => {
    for (const [field, value] of Object.entries(expected)) assert.equal(e[field], value, message);
    return e.message === message;
  });
}
globalThis.host = { callTool: (name, args) => `${name}:${args}` };
assert.equal(sdk.callTool("t", { q: 1 }), 't:{"q":1}');

// emit and outbound.
for (const [message, kind] of [
  ["event kind \"tool_call\" is reserved for the host", "not-allowed"],
  ["at most 256 events per call", "limit"],
  ["the exchange has ended", "event-not-delivered"],
]) {
  globalThis.host = { emit: refuse(message) };
  assert.throws(() => sdk.emit("chunk", {}), (e) => e.kind === kind, message);
}
assert.throws(() => sdk.emit("chunk", 10n), (e) => e.kind === "invalid-data");
for (const [message, kind] of [
  ["host evil.example is not in outbound.allowed_hosts", "outbound-refused"],
  ["request to http://x failed: refused", "outbound-failed"],
]) {
  globalThis.host = { outbound: refuse(message) };
  assert.throws(() => sdk.outbound("agora", "http://x", {}), (e) => e.kind === kind, message);
}

// history: entries, or invalid-data.
globalThis.host = { history: () => '[{"role":"user","body":{"a":1},"at":5},{"role":"agent","body":"b"}]' };
assert.deepEqual(sdk.history(), [{ role: "user", body: { a: 1 }, at: 5 }, { role: "agent", body: "b", at: 0 }]);
for (const text of ["{}", "nope", '[{"body":1}]']) {
  globalThis.host = { history: () => text };
  assert.throws(() => sdk.history(), (e) => e.kind === "invalid-data", text);
}

// A HostError leaving `handle` is an internal failure (componentize-js reads `payload`).
assert.deepEqual(new sdk.HostError("limit", "too big").payload, { kind: "internal", message: "too big" });

// Tool arguments: read as serde reads a struct, or `bad arguments: …`.
const fields = { query: sdk.string, limit: sdk.optional(sdk.count) };
assert.deepEqual(sdk.toolArguments('{"query":"food","limit":3,"extra":1}', fields), { query: "food", limit: 3 });
assert.deepEqual(sdk.toolArguments('["food", null]', fields), { query: "food", limit: undefined });
for (const [text, problem] of [
  ['{"query":5}', "query must be a string"],
  ['{"limit":1}', "missing field `query`"],
  ['{"query":"q","limit":-1}', "limit must be a non-negative integer"],
  ['["food"]', "expected 2 fields, got 1"],
  ['"food"', "expected an object"],
  ["nope", ""],
]) {
  assert.throws(() => sdk.toolArguments(text, fields), (e) => typeof e === "string" && e.startsWith("bad arguments: ") && e.includes(problem), text);
}

// dispatchTool: results as JSON, HostErrors as the tool's error, unknown tools refused.
const tools = {
  search: (text) => ({ found: sdk.toolArguments(text, fields).query }),
  store: () => {
    throw new sdk.HostError("limit", "values are limited to 10 bytes");
  },
};
assert.equal(sdk.dispatchTool("search", '{"query":"q"}', tools), '{"found":"q"}');
assert.throws(() => sdk.dispatchTool("store", "{}", tools), (e) => e === "values are limited to 10 bytes");
assert.throws(() => sdk.dispatchTool("search", "{}", tools), (e) => e === "bad arguments: missing field `query`");
assert.throws(() => sdk.dispatchTool("toString", "{}", tools), (e) => e === 'unknown tool "toString"');
console.log("agora-plugin.js: ok");
