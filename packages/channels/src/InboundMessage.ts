/**
 * `InboundMessage`: one chat message as every connector hands it to the router, whatever the
 * platform. Connectors build a candidate object from the platform's payload and the router decodes
 * it with this schema; a payload that does not decode is answered with a typed `InvalidArgument`
 * and nothing of it is stored (only the `malformed` counter moves).
 *
 * Attachments are metadata only: the router never downloads media.
 *
 * @since 0.1.0
 */
import { Errors } from "@palyra/core"
import { Effect, ParseResult, Schema } from "effect"

const bounded = (max: number) => Schema.String.pipe(Schema.maxLength(max))
const identifier = (max: number) => Schema.String.pipe(Schema.minLength(1), Schema.maxLength(max))

/** A channel's configured name: lower-case letters, digits, `-` and `_`. @since 0.1.0 @category Schemas */
export const ChannelName = Schema.String.pipe(
  Schema.pattern(/^[a-z0-9][a-z0-9_-]{0,63}$/, {
    message: () => "a channel name is 1–64 characters of a-z, 0-9, '-' and '_', starting with a letter or digit"
  })
)

/** What kind of media an attachment is. @since 0.1.0 @category Schemas */
export const AttachmentKind = Schema.Literal("image", "audio", "video", "file", "sticker", "location", "other")
/** @since 0.1.0 @category Schemas */
export type AttachmentKind = typeof AttachmentKind.Type

/** An attachment's metadata (never its bytes). @since 0.1.0 @category Schemas */
export const Attachment = Schema.Struct({
  kind: AttachmentKind,
  /** The platform's id for the file, if any. */
  id: Schema.optional(bounded(512)),
  name: Schema.optional(bounded(512)),
  mimeType: Schema.optional(bounded(256)),
  size: Schema.optional(Schema.NonNegativeInt)
})
/** @since 0.1.0 @category Schemas */
export type Attachment = typeof Attachment.Type

/** Who sent the message, as the platform reports it. @since 0.1.0 @category Schemas */
export const Sender = Schema.Struct({
  /** The platform's stable user id. */
  id: identifier(256),
  /** A user name, e.g. `@alice` (not stable: users can change it). */
  handle: Schema.optional(bounded(256)),
  display: Schema.optional(bounded(512)),
  /** Whether the platform vouches for `id` (a signed update, an authenticated API). */
  verified: Schema.Boolean
})
/** @since 0.1.0 @category Schemas */
export type Sender = typeof Sender.Type

/** Largest text the schema accepts at all; the router's own `maxTextChars` is usually far lower. @since 0.1.0 @category Constants */
export const MAX_TEXT_CHARS = 1_000_000

/** @since 0.1.0 @category Schemas */
export const InboundMessage = Schema.Struct({
  channel: ChannelName,
  /** The bot or workspace account the message reached. */
  account: identifier(256),
  /** The chat, group or channel id. */
  conversation: identifier(256),
  /** A thread or topic inside the conversation. */
  thread: Schema.optional(identifier(256)),
  sender: Sender,
  /** The platform's id for this message; retries of one delivery carry the same id. */
  platformMessageId: identifier(256),
  text: bounded(MAX_TEXT_CHARS),
  attachments: Schema.Array(Attachment).pipe(Schema.maxItems(32)),
  /** A one-to-one chat with the bot. */
  isDirect: Schema.Boolean,
  /** Identifiers the platform marked as mentioned (user names like `@bot`, or user ids). */
  mentions: Schema.Array(bounded(256)).pipe(Schema.maxItems(64)),
  /** When the platform received it (epoch ms). */
  receivedAt: Schema.NonNegativeInt
})
/** @since 0.1.0 @category Schemas */
export type InboundMessage = typeof InboundMessage.Type

const decodeEither = Schema.decodeUnknownEither(InboundMessage, { errors: "first", onExcessProperty: "ignore" })

/**
 * Decode a connector's candidate into an `InboundMessage`, or fail with `InvalidArgument` naming the
 * first bad field.
 *
 * @since 0.1.0
 * @category Decoding
 */
export const decode = (candidate: unknown): Effect.Effect<InboundMessage, Errors.InvalidArgument> => {
  const result = decodeEither(candidate)
  if (result._tag === "Right") return Effect.succeed(result.right)
  const issue = ParseResult.ArrayFormatter.formatErrorSync(result.left)[0]
  return Effect.fail(
    new Errors.InvalidArgument({
      message: `not a valid inbound message: ${issue === undefined ? "invalid" : `${issue.path.join(".") || "(root)"}: ${issue.message}`}`,
      field: issue?.path.join(".")
    })
  )
}
