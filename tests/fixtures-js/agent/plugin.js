// Test fixture: the agent world's capabilities (plugin-sdk/wit) in JavaScript,
// through the SDK's helper (plugin-sdk/bindings/js/agora-plugin.js), each
// reachable by a plain Agora request over a real socket, so a test
// (tests/e2e/scripting.rs) reads back what the host gave the plugin or the
// HostError it threw. Built with `componentize-js --world-name agent` and
// type-checked (tsconfig.json) by the test.
//
// Body `{"op": …}`:
// - `greet` `{text}` → `{"reply": "<greeting>: <text>"}`, the setting `greeting`
//   (`configGet`), "you said" when unset;
// - `get` `{key}` → `{"value": setting or null}`, or `{"error", "kind"}` of the HostError;
// - `chat` `{text}` → `{"text"}` of the model's whole answer (`complete`), or
//   `{"error", "kind", "model_kind"}` of the HostError;
// - `ready` `{provider?}` → `{"ready": bool}` (`modelReady`);
// - `tools` → `{"tools": [{"name", "risk", "parameters"}]}` (`listTools`);
// - `ticks` → `{"count": n}`, the runs of the schedule `count` so far;
// - `fetch` `{url, method?, body?}` → `{"status", "body"}` of a request with the
//   global `fetch()` (componentize-js sends it through the host's `wasi:http`), or
//   `{"error"}` naming the request.
//
// Capabilities: the default model; outgoing HTTP to the origin in the setting
// `fetch_origin`, when set; the prompt `js_greeting` (`who` required), its document
// shown as `text/plain`; and two schedules every second: `count` adds one to
// `ticks`; `unreadable` reads the setting `gone` (a secret the tests leave
// unset), so its runs fail with the host's settings error.

import {
  badRequest,
  capabilities,
  ChatRequest,
  complete,
  configGet,
  dispatchPrompt,
  dispatchTick,
  dispatchTool,
  HostError,
  jsonObject,
  kvGetJson,
  kvSetJson,
  listTools,
  manifest as manifestOf,
  modelReady,
  prompt,
  string,
  toolArguments,
} from "../../../plugin-sdk/bindings/js/agora-plugin.js";

/** @typedef {import("agora:node/agent@0.1.0").Manifest} Manifest */
/** @typedef {import("agora:node/agent@0.1.0").Message} Message */

const DOCUMENT =
  "name: JavaScript agent fixture\n" +
  "description: settings, model and schedules of the agent world, in JavaScript\n" +
  "multiround: false\n" +
  "---\n" +
  'body: {"op": "greet" | "get" | "chat" | "ready" | "tools" | "ticks" | "fetch", …}.\n';

/** @returns {Manifest} */
export function manifest() {
  return manifestOf({
    name: "fixture-js-agent",
    version: "1.0.0",
    protocols: [DOCUMENT],
    tools: [
      {
        name: "js_agent_echo",
        description: "Answers its text.",
        parameters: JSON.stringify({ type: "object", properties: { text: { type: "string" } }, required: ["text"] }),
        risk: "low",
      },
    ],
  });
}

/** @param {string} text */
function modelAnswer(text) {
  try {
    const answer = complete(new ChatRequest().system("Be brief.").user(text));
    return { text: answer.text };
  } catch (error) {
    if (!(error instanceof HostError)) throw error;
    return { error: error.message, kind: error.kind, model_kind: error.modelKind };
  }
}

/**
 * A request with the global `fetch()`, as any JavaScript makes it. StarlingMonkey
 * rejects a destination the node refuses as it rejects an unreachable one (a bare
 * "NetworkError"; the node's log says why), so the error names where it went.
 * @param {string} url @param {string} method @param {string | undefined} body
 */
async function fetched(url, method, body) {
  try {
    const response = await fetch(url, { method, body });
    return { status: response.status, body: await response.text() };
  } catch (error) {
    return { error: `${method} ${url}: ${error instanceof Error ? error.message : String(error)}` };
  }
}

/** @param {Message} message @returns {Promise<string>} */
export async function handle(message) {
  const request = jsonObject(message.body);
  if (request === null) throw badRequest("the body must be an object");
  const text = String(request.text ?? "");
  switch (request.op) {
    case "greet": {
      const greeting = configGet("greeting") ?? "you said";
      return JSON.stringify({ reply: `${greeting}: ${text}` });
    }
    case "get":
      try {
        return JSON.stringify({ value: configGet(String(request.key ?? "")) ?? null });
      } catch (error) {
        if (!(error instanceof HostError)) throw error;
        return JSON.stringify({ error: error.message, kind: error.kind });
      }
    case "chat":
      return JSON.stringify(modelAnswer(text));
    case "ready":
      return JSON.stringify({ ready: modelReady(request.provider === undefined ? undefined : String(request.provider)) });
    case "tools":
      return JSON.stringify({
        tools: listTools().map((t) => ({ name: t.name, risk: t.risk, parameters: t.parameters })),
      });
    case "ticks":
      return JSON.stringify({ count: kvGetJson("ticks") ?? 0 });
    case "fetch":
      return JSON.stringify(
        await fetched(
          String(request.url ?? ""),
          String(request.method ?? "GET"),
          request.body === undefined ? undefined : String(request.body),
        ),
      );
    default:
      throw badRequest(`unknown op ${JSON.stringify(request.op)}`);
  }
}

/** @param {string} name @param {string} argumentsText @returns {string} */
export function runTool(name, argumentsText) {
  return dispatchTool(name, argumentsText, {
    js_agent_echo: (text) => ({ text: toolArguments(text, { text: string }).text }),
  });
}

export const extensions = {
  /** @returns {string} */
  capabilities: () => {
    const origin = configGet("fetch_origin");
    return capabilities({
      llm: ["default"],
      schedules: { count: "1s", unreadable: "1s" },
      allowedHosts: origin === undefined ? [] : [origin],
      prompts: [prompt("js_greeting", "Greets someone.", [["who", "whom to greet", true]])],
      documents: { default: "text/plain" },
    });
  },
  /** @param {string} name @returns {void} */
  tick: (name) =>
    dispatchTick(name, {
      count: () => kvSetJson("ticks", Number(kvGetJson("ticks") ?? 0) + 1),
      unreadable: () => configGet("gone"),
    }),
};

export const prompts = {
  /** @param {string} name @param {string} argumentsText @returns {string} */
  get: (name, argumentsText) =>
    dispatchPrompt(name, argumentsText, {
      js_greeting: (args) => [["user", `Greet ${args.who} in JavaScript.`]],
    }),
};
