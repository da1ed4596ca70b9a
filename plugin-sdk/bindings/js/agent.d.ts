/// <reference path="./interfaces/agora-node-extensions.d.ts" />
/// <reference path="./interfaces/agora-node-host.d.ts" />
/// <reference path="./interfaces/agora-node-llm.d.ts" />
/// <reference path="./interfaces/agora-node-prompts.d.ts" />
/// <reference path="./interfaces/agora-node-types.d.ts" />
declare module 'agora:node/agent@0.1.0' {
  export type Manifest = import('agora:node/types@0.1.0').Manifest;
  export type Message = import('agora:node/types@0.1.0').Message;
  export type Failure = import('agora:node/types@0.1.0').Failure;
  export type * as AgoraNodeHost010 from 'agora:node/host@0.1.0'; // import agora:node/host@0.1.0
  export type * as AgoraNodeLlm010 from 'agora:node/llm@0.1.0'; // import agora:node/llm@0.1.0
  export type * as AgoraNodeTypes010 from 'agora:node/types@0.1.0'; // import agora:node/types@0.1.0
  export * as extensions from 'agora:node/extensions@0.1.0'; // export agora:node/extensions@0.1.0
  export * as prompts from 'agora:node/prompts@0.1.0'; // export agora:node/prompts@0.1.0
  /**
  * What the plugin serves. Called once when the plugin is loaded.
  */
  export function manifest(): Manifest;
  /**
  * Answer one message: JSON text, or a typed failure.
  */
  export function handle(message: Message): string;
  /**
  * Run one of the tools named in the manifest with JSON arguments.
  */
  export function runTool(name: string, arguments: string): string;
  export type Result<T, E> = { tag: 'ok', val: T } | { tag: 'err', val: E };
}
