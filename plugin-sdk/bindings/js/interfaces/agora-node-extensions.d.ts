declare module 'agora:node/extensions@0.1.0' {
  /**
   * JSON text, read once after the manifest (settings may be read meanwhile):
   * `{"llm": ["default" | PROVIDER, …], "schedules": [{"name": …, "every": "30s" | CRON}, …],
   *   "allowed_hosts": ["https://api.example.org", …]}` — the last, where `wasi:http`
   * requests may go (the node's `outbound.allowed_hosts` must list each host too).
   * Keys the host does not know are refused, so a plugin never believes it has what it has not.
   */
  export function capabilities(): string;
  /**
   * Run the schedule `name` (one of `capabilities`' schedules). The host calls
   * it at most once at a time per schedule, under the same limits as any call.
   */
  export function tick(name: string): void;
}
