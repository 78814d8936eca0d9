/**
 * Why the router turned a message away. Each reason is a stable code: it is what the rejections log
 * counts, what metrics and consoles show, and what tests assert. Codes are never reworded.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/** @since 0.1.0 @category Models */
export const Reason = Schema.Literal(
  /** The channel is not configured, or configured with `enabled = false`. */
  "channel_disabled",
  /** The payload did not decode as an `InboundMessage`. */
  "malformed",
  /** A webhook request whose signature did not verify. */
  "bad_signature",
  /** A webhook request whose timestamp is outside the replay window. */
  "stale_signature",
  /** A platform retry of a message already handled. */
  "duplicate",
  /** Longer than the channel's `maxTextChars`. */
  "too_long",
  /** Neither text nor attachments. */
  "empty",
  /** The platform does not vouch for the sender's id. */
  "unverified_sender",
  /** On the deny list, or not on a non-empty allow list. */
  "sender_denied",
  /** A direct message on a channel whose DM policy is `deny`. */
  "dm_denied",
  /** An unpaired sender where pairing is required. */
  "not_paired",
  /** A pairing code that is wrong, expired, used or for another channel. */
  "pairing_failed",
  /** Too many wrong pairing codes: the sender is locked out for a while. */
  "locked_out",
  /** Too many wrong pairing codes on the channel, from all senders: pairing there is paused for a while. */
  "pairing_throttled",
  /** A group message that does not mention the bot. */
  "not_mentioned",
  /** A group message that reached the bot only through `@everyone`/`@here`. */
  "broadcast_denied",
  /** The channel's admission queue is full. */
  "queue_full",
  /** The Gateway refused the message (e.g. a limit); the sender is told. */
  "gateway_refused"
)
/** @since 0.1.0 @category Models */
export type Reason = typeof Reason.Type

/** Every reason code, in declaration order. @since 0.1.0 @category Constants */
export const reasons: ReadonlyArray<Reason> = Reason.literals
