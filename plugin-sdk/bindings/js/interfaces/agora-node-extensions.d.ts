declare module 'agora:node/extensions@0.1.0' {
  /**
   * JSON text, read once after the manifest (settings may be read meanwhile):
   * `{"llm": ["default" | PROVIDER, …], "schedules": [{"name": …, "every": "30s" | CRON}, …],
   *   "allowed_hosts": ["https://api.example.org", …],
   *   "prompts": [{"name": …, "description": …, "arguments": [{"name", "description", "required"}]}, …],
   *   "documents": {"<document SHA1, hex>" | "default": {"mime_type": "text/plain"}}}` —
   * `allowed_hosts`, where `wasi:http` requests may go (the node's
   * `outbound.allowed_hosts` must list each host too); `prompts`, what MCP clients
   * are offered (rendered by the `prompts` export); `documents`, the media type
   * MCP clients are shown for a protocol document (else `text/markdown`).
   * Keys the host does not know are refused, so a plugin never believes it has what it has not.
   */
  export function capabilities(): string;
  /**
   * Run the schedule `name` (one of `capabilities`' schedules). The host calls
   * it at most once at a time per schedule, under the same limits as any call.
   */
  export function tick(name: string): void;
}
