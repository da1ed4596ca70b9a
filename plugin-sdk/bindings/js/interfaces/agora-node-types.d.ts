declare module 'agora:node/types@0.1.0' {
  /**
   * Which wire protocol a message arrived on.
   * # Variants
   * 
   * ## `"agora"`
   * 
   * Agora two-party JSON exchanges (`POST /agora`).
   * ## `"envelope"`
   * 
   * Ed25519-signed Agora envelopes (`POST /envelopes`, `/envelopes/ws`).
   * ## `"uagents"`
   * 
   * Fetch.ai uAgents envelopes (`POST /submit`).
   * ## `"arena"`
   * 
   * Agora Arena tasks (`POST /arena`).
   * ## `"hai"`
   * 
   * Human chat over WebSocket (`GET /ws`).
   */
  export type Transport = 'agora' | 'envelope' | 'uagents' | 'arena' | 'hai';
  /**
   * What the host asks of `handle`.
   * # Variants
   * 
   * ## `"handle"`
   * 
   * Answer the message.
   * ## `"quote"`
   * 
   * Price a request for a negotiated envelope resource: reply `{"cost": n, "ttl": ms, "eta": ms}`.
   * ## `"execute"`
   * 
   * Run a request whose offer the sender accepted.
   */
  export type Phase = 'handle' | 'quote' | 'execute';
  /**
   * One inbound message, verified and routed by the host.
   */
  export interface Message {
    transport: Transport,
    phase: Phase,
    /**
     * The routing key that selected this plugin: a protocol document's SHA1 (hex),
     * an envelope resource, a uAgents schema digest, an arena league, or "assistant".
     */
    route: string,
    /**
     * The sender's verified identity (did:key, agent1… address, arena id, session user).
     */
    sender?: string,
    /**
     * Conversation or session id when the exchange is stateful.
     */
    conversation?: string,
    /**
     * The message body as JSON text.
     */
    body: string,
  }
  /**
   * # Variants
   * 
   * ## `"bad-request"`
   * 
   * The body is not valid for the protocol.
   * ## `"unsupported"`
   * 
   * The plugin does not support what was asked.
   * ## `"not-found"`
   * 
   * The thing asked for does not exist.
   * ## `"payment-required"`
   * 
   * The request needs payment or a larger budget.
   * ## `"internal"`
   * 
   * The plugin failed for its own reasons.
   */
  export type FailureKind = 'bad-request' | 'unsupported' | 'not-found' | 'payment-required' | 'internal';
  export interface Failure {
    kind: FailureKind,
    message: string,
  }
  /**
   * # Variants
   * 
   * ## `"low"`
   * 
   * ## `"medium"`
   * 
   * ## `"high"`
   * 
   * ## `"critical"`
   */
  export type Risk = 'low' | 'medium' | 'high' | 'critical';
  /**
   * A tool other plugins (and the HAI assistant) may call through the host.
   */
  export interface Tool {
    name: string,
    description: string,
    /**
     * JSON Schema of the arguments object, as JSON text.
     */
    parameters: string,
    risk: Risk,
  }
  /**
   * A signed-envelope resource.
   */
  export interface EnvelopeResource {
    name: string,
    description: string,
    /**
     * Negotiated resources are priced (`phase::quote`) before they run.
     */
    negotiated: boolean,
  }
  /**
   * A uAgents message model; the host derives its schema digest from `schema`.
   */
  export interface MessageModel {
    name: string,
    /**
     * The model's JSON schema (pydantic v1 style) as JSON text.
     */
    schema: string,
  }
  export interface WarmPool {
    maxInvocations: number,
    maxConcurrency: number,
    idleTimeoutMs: number,
  }
  /**
   * How the host instantiates the plugin for each request.
   */
  export type InstancePolicy = InstancePolicyFresh | InstancePolicyWarm;
  /**
   * A fresh instance per request: nothing leaks between requests.
   */
  export interface InstancePolicyFresh {
    tag: 'fresh',
  }
  /**
   * Reuse instances from a bounded pool (cheaper; state may persist between requests).
   */
  export interface InstancePolicyWarm {
    tag: 'warm',
    val: WarmPool,
  }
  export interface Manifest {
    name: string,
    version: string,
    description: string,
    /**
     * Full text of every Agora protocol document this plugin implements.
     */
    protocols: Array<string>,
    /**
     * Serve Agora requests with no protocol hash (the node's default plugin).
     */
    defaultAgora: boolean,
    /**
     * Serve any Agora protocol document a request carries and that hashes correctly.
     */
    acceptsAnyDocument: boolean,
    resources: Array<EnvelopeResource>,
    models: Array<MessageModel>,
    leagues: Array<string>,
    /**
     * Serve HAI chat sessions.
     */
    assistant: boolean,
    tools: Array<Tool>,
    instance: InstancePolicy,
  }
}
