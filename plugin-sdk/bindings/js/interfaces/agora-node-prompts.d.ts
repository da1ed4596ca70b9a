declare module 'agora:node/prompts@0.1.0' {
  /**
   * Render the prompt `name` with `arguments`, a JSON object of strings (the
   * host has checked that every required argument is there): JSON text
   * `{"description"?: …, "messages": [{"role": "user" | "assistant", "text": …}, …]}`,
   * or why it cannot. Run under the same instance policy and limits as `run-tool`.
   */
  export function get(name: string, arguments: string): string;
}
