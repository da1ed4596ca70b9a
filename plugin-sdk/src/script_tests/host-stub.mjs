// Stands in for the component imports `agora:node/host@0.1.0` and
// `agora:node/llm@0.1.0` when the JS helper runs under Node: each call does
// what the test put in `globalThis.host`.
const call = (name) => (...args) => globalThis.host[name](...args);

export const kvGet = call("kvGet");
export const kvSet = call("kvSet");
export const kvDelete = call("kvDelete");
export const emit = call("emit");
export const callTool = call("callTool");
export const history = call("history");
export const outbound = call("outbound");
export const configGet = call("configGet");
export const listTools = call("listTools");
export const chat = call("chat");
export const ready = call("ready");
