// Behaviour of plugin-sdk/bindings/js/agora-plugin.js under Node, with the host
// and llm imports stubbed (host-stub.mjs): run by `cargo test -p agora-plugin-sdk`.
import assert from "node:assert/strict";
import { register } from "node:module";

const stub = new URL("./host-stub.mjs", import.meta.url).href;
const hooks = `export async function resolve(specifier, context, next) {
  return ["agora:node/host@0.1.0", "agora:node/llm@0.1.0"].includes(specifier) ? { url: ${JSON.stringify(stub)}, shortCircuit: true } : next(specifier, context);
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
// Settings: absent is undefined, an unreadable secret is "settings".
globalThis.host = { configGet: (key) => ({ greeting: "hey" })[key] };
assert.equal(sdk.configGet("greeting"), "hey");
assert.equal(sdk.configGet("absent"), undefined);
globalThis.host = { configGet: refuse("secret gone: the environment variable PLUGIN_SECRET is not set") };
assert.throws(() => sdk.configGet("gone"), (e) => e instanceof sdk.HostError && e.kind === "settings" && e.message.includes("PLUGIN_SECRET"));

// The tool list, or invalid-data.
globalThis.host = { listTools: () => '[{"name":"t","description":"d","parameters":{"type":"object"},"risk":"low"}]' };
assert.deepEqual(sdk.listTools(), [{ name: "t", description: "d", parameters: { type: "object" }, risk: "low" }]);
for (const text of ["nope", "{}", '[{"name":"t"}]']) {
  globalThis.host = { listTools: () => text };
  assert.throws(() => sdk.listTools(), (e) => e.kind === "invalid-data", text);
}

// A chat request is the WIT record.
const call = { id: "c1", name: "t", arguments: "{}" };
const request = new sdk.ChatRequest()
  .provider("hosted")
  .system("s")
  .user("u")
  .assistantCalls("", [call])
  .toolResult("c1", "r")
  .tool("t", "d", { type: "object" })
  .temperature(0.5)
  .maxTokens(9);
assert.deepEqual(request.toWit(), {
  provider: "hosted",
  messages: [
    { role: "system", content: "s", toolCalls: [], toolCallId: undefined },
    { role: "user", content: "u", toolCalls: [], toolCallId: undefined },
    { role: "assistant", content: "", toolCalls: [call], toolCallId: undefined },
    { role: "tool", content: "r", toolCalls: [], toolCallId: "c1" },
  ],
  tools: [{ name: "t", description: "d", parameters: '{"type":"object"}' }],
  temperature: 0.5,
  maxTokens: 9,
});
assert.equal(new sdk.ChatRequest().toWit().provider, undefined);

// An answer streams and completes; errors are "model" errors with the WIT's kind.
const streamOf = (items) => ({
  released: false,
  next() {
    const item = items.shift();
    if (item instanceof Error) throw item;
    return item;
  },
  [Symbol.dispose]() {
    this.released = true;
  },
});
const usage = { inputTokens: 3, outputTokens: 2 };
const chunks = [
  { text: "Hel", toolCalls: [], finishReason: undefined, usage: undefined },
  { text: "lo", toolCalls: [call], finishReason: "tool_calls", usage },
  undefined,
];
let stream = streamOf([...chunks]);
globalThis.host = { chat: () => stream };
assert.deepEqual(sdk.complete(new sdk.ChatRequest().user("hi")), { text: "Hello", toolCalls: [call], finishReason: "tool_calls", usage });
assert.equal(stream.released, true);
const timedOut = Object.assign(new Error("import failed"), { payload: { kind: "timed-out", message: "no next chunk" } });
stream = streamOf([chunks[0], timedOut]);
const texts = [];
assert.throws(
  () => {
    for (const chunk of sdk.chat(new sdk.ChatRequest().user("hi"))) texts.push(chunk.text);
  },
  (e) => e instanceof sdk.HostError && e.kind === "model" && e.modelKind === "timed-out" && e.message === "no next chunk",
);
assert.deepEqual(texts, ["Hel"]);
assert.equal(stream.released, true);
globalThis.host = { chat: refuse({ kind: "not-configured", message: "no language model is configured" }) };
assert.throws(() => sdk.chat(new sdk.ChatRequest().user("hi")), (e) => e.modelKind === "not-configured" && e.message === "no language model is configured");

// modelReady asks the host about the provider it names, the default when none.
const asked = [];
globalThis.host = { ready: (provider) => (asked.push(provider), provider === undefined) };
assert.equal(sdk.modelReady(), true);
assert.equal(sdk.modelReady("hosted"), false);
assert.deepEqual(asked, [undefined, "hosted"]);

// Capabilities and ticks.
assert.equal(sdk.capabilities({}), "{}");
assert.equal(
  sdk.capabilities({ llm: ["default"], schedules: { poll: "30s" } }),
  '{"llm":["default"],"schedules":[{"name":"poll","every":"30s"}]}',
);
assert.equal(
  sdk.capabilities({ allowedHosts: ["https://api.example.org"] }),
  '{"allowed_hosts":["https://api.example.org"]}',
);
const ran = [];
const schedules = {
  poll: () => ran.push("poll"),
  fail: () => {
    throw new sdk.HostError("settings", "secret gone");
  },
};
sdk.dispatchTick("poll", schedules);
assert.deepEqual(ran, ["poll"]);
assert.throws(() => sdk.dispatchTick("fail", schedules), (e) => e === "secret gone");
assert.throws(() => sdk.dispatchTick("toString", schedules), (e) => e === 'no schedule named "toString"');
assert.deepEqual(
  JSON.parse(
    sdk.capabilities({
      prompts: [sdk.prompt("greet", "Greets.", [["who", "whom", true]])],
      documents: { default: "text/plain" },
    }),
  ),
  {
    prompts: [{ name: "greet", description: "Greets.", arguments: [{ name: "who", description: "whom", required: true }] }],
    documents: { default: { mime_type: "text/plain" } },
  },
);
const renderers = {
  greet: (args) => [
    ["user", `Hi ${args.who}`],
    ["assistant", "Hello"],
  ],
  fail: () => {
    throw new sdk.HostError("settings", "secret gone");
  },
};
assert.deepEqual(JSON.parse(sdk.dispatchPrompt("greet", '{"who":"Ada"}', renderers)), {
  messages: [
    { role: "user", text: "Hi Ada" },
    { role: "assistant", text: "Hello" },
  ],
});
assert.throws(() => sdk.dispatchPrompt("fail", "{}", renderers), (e) => e === "secret gone");
assert.throws(() => sdk.dispatchPrompt("toString", "{}", renderers), (e) => e === 'no prompt named "toString"');
assert.throws(() => sdk.noPrompts.get("greet", "{}"), (e) => e === 'no prompt named "greet"');
console.log("agora-plugin.js: ok");
