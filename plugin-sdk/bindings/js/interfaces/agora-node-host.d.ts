/// <reference path="./agora-node-types.d.ts" />
declare module 'agora:node/host@0.1.0' {
  /**
   * Structured log line, attributed to the plugin.
   */
  export function log(level: Level, message: string): void;
  /**
   * Key-value store namespaced to this plugin, persisted by the node.
   */
  export function kvGet(key: string): Uint8Array | undefined;
  export function kvSet(key: string, value: Uint8Array): void;
  export function kvDelete(key: string): void;
  /**
   * Keys starting with `prefix`, at most `limit`.
   */
  export function kvKeys(prefix: string, limit: number): Array<string>;
  /**
   * Wall-clock time, milliseconds since the Unix epoch.
   */
  export function nowMs(): bigint;
  /**
   * Emit an event to the current exchange: a stream chunk, a status, an arena event.
   * `data` is JSON text.
   */
  export function emit(kind: string, data: string): void;
  /**
   * Call a tool offered by another plugin. The host runs it, reports its lifecycle
   * and asks the human for approval when the tool's risk requires it.
   */
  export function callTool(name: string, arguments: string): string;
  /**
   * The current conversation's or session's history as a JSON array of
   * `{"role": …, "body": …, "at": ms}`.
   */
  export function history(): string;
  /**
   * Call another agent. Only hosts allowed in config are reachable; a
   * `uagents` message with an empty `url` goes where the node resolves its
   * `target` (an error says why when it cannot: no `uagents.almanac_api`,
   * the lookup failed, the address is not registered, or no endpoint is allowed).
   */
  export function outbound(request: OutboundRequest): string;
  /**
   * Call an A2A 1.0 agent (JSON-RPC binding) at its base URL `url`: its card
   * is read first, and the card, the endpoint it names and any redirect must
   * be allowed in config, as for `outbound`. `body` is JSON text
   * `{"text": …?, "data": …?, "context_id": …?, "task_id": …?}`; the answer
   * is the final Task JSON (or the agent's Message JSON when it answers with one).
   * A separate function rather than a `transport` case, so plugins built
   * before it keep loading.
   */
  export function outboundA2a(url: string, body: string): string;
  /**
   * The protocol of the client this call serves, by name: `agora`, `envelope`,
   * `uagents`, `arena` or `hai` as `message.transport` names them, `a2a` for
   * an A2A 1.0 client (whose messages `message.transport` reports as `hai`,
   * the nearest case 0.1.0 has), or `mcp` for a tool an MCP client called. A
   * tool called from a call sees that call's. None for the node's own calls:
   * the manifest, `capabilities` and schedules. A function rather than a
   * `transport` case, so plugins built before it keep loading.
   */
  export function callerTransport(): string | undefined;
  /**
   * A value of this plugin's settings: `[plugins.NAME.config]` in the node's
   * configuration, else `[plugins.NAME.secrets]` (each secret read from the
   * environment variable or file the operator named). None when neither has
   * `key`; an error naming the key when a secret's source cannot be read.
   * Settings change with the node's configuration file, without a restart.
   */
  export function configGet(key: string): string | undefined;
  /**
   * The tools `call-tool` can reach, as a JSON array of
   * `{"name", "description", "parameters", "risk"}` (what a language model is offered).
   */
  export function listTools(): string;
  export type Transport = import('agora:node/types@0.1.0').Transport;
  /**
   * # Variants
   * 
   * ## `"trace"`
   * 
   * ## `"debug"`
   * 
   * ## `"info"`
   * 
   * ## `"warn"`
   * 
   * ## `"error"`
   */
  export type Level = 'trace' | 'debug' | 'info' | 'warn' | 'error';
  export interface OutboundRequest {
    transport: Transport,
    /**
     * The peer's URL; its host must be allowed in the node's config.
     * For `uagents` it may be empty: the node then finds the endpoint of
     * `target` itself, as for its own replies (`uagents.peers`, else the
     * Almanac at `uagents.almanac_api`, to an endpoint its policy allows).
     */
    url: string,
    /**
     * JSON text: for `agora`, `{"body": …, "protocol": "<document text>"?}`;
     * for `envelope`, `{"resource", "params"?, "budget"?, "timeout"?, "payment_proof"?}`;
     * for `uagents`, `{"target": "agent1…", "schema": {…} | "schema_digest": "model:…",
     * "message": {…}, "sync": bool?}` (the node signs as its own address).
     * `arena` and `hai` have no outbound calls.
     */
    body: string,
  }
}
