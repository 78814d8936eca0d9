/**
 * The one interface every chat platform adapter implements. A connector is thin: it turns platform
 * payloads into `InboundMessage` candidates (the router decodes and judges them), and sends outbox
 * deliveries. It makes no admission decision of its own, except refusing requests that do not
 * authenticate (a bad webhook signature), which it only counts.
 *
 * @since 0.1.0
 */
import { type Effect, Schema, type Scope } from "effect"
import type { Reason } from "./Rejection.js"

/** A message to send: one outbox delivery. @since 0.1.0 @category Models */
export interface Outbound {
  /** The idempotency key; stable across retries of this delivery. */
  readonly key: string
  readonly account: string
  readonly conversation: string
  readonly thread: string | null
  readonly replyTo: string | null
  readonly text: string
  /** When the delivery was enqueued (epoch ms): lets `reconcile` bound its search. */
  readonly createdAt?: number | undefined
}

/** @since 0.1.0 @category Models */
export interface Sent {
  readonly platformMessageId: string | null
}

/** The platform asked us to slow down; nothing was sent. @since 0.1.0 @category Errors */
export class RateLimited extends Schema.TaggedError<RateLimited>("@palyra/channels/RateLimited")("RateLimited", {
  retryAfterMs: Schema.Number,
  message: Schema.String
}) {}

/**
 * A send that did not succeed. `outcome: "not_sent"` means the platform certainly did not deliver it
 * (`permanent` when retrying cannot help, e.g. the chat does not exist); `"unknown"` means it may
 * have (a timeout, a dropped connection, a server error after the request went out).
 *
 * @since 0.1.0
 * @category Errors
 */
export class SendFailed extends Schema.TaggedError<SendFailed>("@palyra/channels/SendFailed")("SendFailed", {
  outcome: Schema.Literal("not_sent", "unknown"),
  permanent: Schema.Boolean,
  message: Schema.String,
  status: Schema.optional(Schema.Number)
}) {}

/** A connector could not start (bad token, unreachable API, port in use). @since 0.1.0 @category Errors */
export class ConnectorError extends Schema.TaggedError<ConnectorError>("@palyra/channels/ConnectorError")(
  "ConnectorError",
  { channel: Schema.String, message: Schema.String, cause: Schema.optional(Schema.Defect) }
) {}

/** What a connector hands inbound traffic to. @since 0.1.0 @category Models */
export interface Sink {
  /**
   * Decode and route one candidate message: `malformed` when it does not decode, `failed` when it
   * could not be handled now (storage trouble: the platform should retry), else `accepted` (which
   * includes messages the router rejected: they were handled).
   */
  readonly receive: (candidate: unknown) => Effect.Effect<"accepted" | "malformed" | "failed">
  /** Count a request refused at the edge (e.g. `bad_signature`); nothing else of it is kept. */
  readonly refuse: (reason: Reason) => Effect.Effect<void>
}

/** What a connector knows about a delivery whose outcome was unknown at a restart. @since 0.1.0 @category Models */
export type Reconciled = "sent" | "resend" | "unknown"

/** @since 0.1.0 @category Models */
export interface Connector {
  /** The channel's configured name. */
  readonly channel: string
  readonly kind: string
  /** The platform's largest message, in UTF-16 code units; longer replies are split. */
  readonly maxMessageLength: number
  /** Where the connector listens for inbound requests, when it does (webhooks). */
  readonly inboundUrl?: string | undefined
  /** How people write commands on this platform (default `/`): the bot's messages show it. */
  readonly commandPrefix?: string | undefined
  /** The bot's own names (`@mybot`) and ids, added to the channel's mention patterns. */
  readonly self: { readonly mentionPatterns: ReadonlyArray<string>; readonly mentionIds: ReadonlyArray<string> }
  /** Start receiving; stops when the scope closes. */
  readonly start: (sink: Sink) => Effect.Effect<void, ConnectorError, Scope.Scope>
  readonly send: (message: Outbound) => Effect.Effect<Sent, RateLimited | SendFailed>
  /**
   * After a restart, for a delivery whose send had started: `sent` (the platform has it), `resend`
   * (the platform dedupes by key, so sending again is safe) or `unknown` (it cannot tell: the
   * delivery is left marked, never re-sent blindly).
   */
  readonly reconcile: (message: Outbound) => Effect.Effect<Reconciled>
}
