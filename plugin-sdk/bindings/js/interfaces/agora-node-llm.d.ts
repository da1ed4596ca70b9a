declare module 'agora:node/llm@0.1.0' {
  /**
   * Ask the model. Refused at once (never a hang) when the plugin did not
   * declare the provider, the node has none configured, or a limit is reached.
   */
  export function chat(request: ChatRequest): ChatStream;
  /**
   * Whether the node has the provider `provider` (none: the default `[llm]`)
   * configured and the plugin's capabilities declare it: what `chat` checks
   * first, asked before gathering what a chat would need (the history, the
   * tools). Spends nothing (no call, no limit) and says nothing of limits or
   * of the provider's health: `chat` may still fail.
   */
  export function ready(provider: string | undefined): boolean;
  /**
   * # Variants
   * 
   * ## `"system"`
   * 
   * ## `"user"`
   * 
   * ## `"assistant"`
   * 
   * ## `"tool"`
   */
  export type Role = 'system' | 'user' | 'assistant' | 'tool';
  /**
   * A tool call the model made, or one replayed in the history.
   */
  export interface ToolCall {
    id: string,
    name: string,
    /**
     * The arguments as JSON text, as the model wrote them.
     */
    arguments: string,
  }
  export interface ChatMessage {
    role: Role,
    content: string,
    /**
     * What an assistant message asked to call (empty otherwise).
     */
    toolCalls: Array<ToolCall>,
    /**
     * The call a `tool` message answers.
     */
    toolCallId?: string,
  }
  /**
   * A tool the model may call: `parameters` is its JSON Schema as JSON text.
   */
  export interface ToolDefinition {
    name: string,
    description: string,
    parameters: string,
  }
  export interface ChatRequest {
    /**
     * A named provider (`[llm.providers.NAME]`); none: the default `[llm]`.
     */
    provider?: string,
    messages: Array<ChatMessage>,
    tools: Array<ToolDefinition>,
    temperature?: number,
    maxTokens?: number,
  }
  export interface Usage {
    inputTokens: number,
    outputTokens: number,
  }
  /**
   * One piece of the answer as it arrives: a text delta, and, in the chunk that
   * ends the answer, the complete tool calls, why it finished and its usage.
   */
  export interface Chunk {
    text: string,
    toolCalls: Array<ToolCall>,
    finishReason?: string,
    usage?: Usage,
  }
  /**
   * # Variants
   * 
   * ## `"not-configured"`
   * 
   * The node has no such provider configured (`[llm]` or `[llm.providers.NAME]`).
   * ## `"not-declared"`
   * 
   * The plugin's capabilities do not declare the provider.
   * ## `"limited"`
   * 
   * The plugin's calls per minute or tokens per day are spent.
   * ## `"bad-request"`
   * 
   * The request is not one the host sends (too large, malformed tool schema).
   * ## `"failed"`
   * 
   * The provider answered an error, broke off, or sent what is not its protocol.
   * ## `"timed-out"`
   * 
   * The provider did not answer, or stopped sending, within the node's timeout.
   */
  export type ErrorKind = 'not-configured' | 'not-declared' | 'limited' | 'bad-request' | 'failed' | 'timed-out';
  export interface LlmError {
    kind: ErrorKind,
    /**
     * What went wrong, for people; never holds the provider's key.
     */
    message: string,
  }
  
  export class ChatStream implements Disposable {
    /**
     * This type does not have a public constructor.
     */
    private constructor();
    /**
    * The next chunk; none once the answer has ended. An error ends it too.
    */
    next(): Chunk | undefined;
    [Symbol.dispose](): void;
  }
}
