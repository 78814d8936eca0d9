/**
 * Session keys and per-identity principals for chat conversations.
 *
 * A key is derived from (channel, account, conversation[, thread][, sender]). Every component is
 * escaped (`%`, `/` and `:` become `%25`, `%2F`, `%3A`) and the optional ones are tagged, so the
 * mapping is injective: two different tuples never share a key (`parse` inverts it, and a property
 * test checks both). A conversation can therefore never be steered into another one's session by a
 * crafted id.
 *
 * The Gateway finds sessions by (principal, key), so a key only ever reaches sessions of the
 * principal the message is admitted as.
 *
 * @since 0.1.0
 */
import { Option } from "effect"

/** @since 0.1.0 @category Models */
export interface KeyParts {
  readonly channel: string
  readonly account: string
  readonly conversation: string
  readonly thread?: string | undefined
  /** Set when each sender of a shared conversation gets a private session. */
  readonly sender?: string | undefined
}

const PREFIX = "chan1"

/** Escape one component so it holds no `/` or `:` (injective: `%` is escaped too). @since 0.1.0 @category Encoding */
export const encodeComponent = (value: string): string =>
  value.replace(/[%/:]/g, (c) => (c === "%" ? "%25" : c === "/" ? "%2F" : "%3A"))

/** The inverse of `encodeComponent`. @since 0.1.0 @category Encoding */
export const decodeComponent = (value: string): string =>
  value.replace(/%(25|2F|3A)/g, (_, hex: string) => (hex === "25" ? "%" : hex === "2F" ? "/" : ":"))

const optional = (tag: string, value: string | undefined) =>
  value === undefined ? tag : `${tag}:${encodeComponent(value)}`

/**
 * The session key of a conversation (and thread, and sender when isolated).
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = (parts: KeyParts): string =>
  [
    PREFIX,
    encodeComponent(parts.channel),
    encodeComponent(parts.account),
    encodeComponent(parts.conversation),
    optional("t", parts.thread),
    optional("s", parts.sender)
  ].join("/")

const readOptional = (tag: string, segment: string): Option.Option<string | undefined> => {
  if (segment === tag) return Option.some(undefined)
  return segment.startsWith(`${tag}:`) ? Option.some(decodeComponent(segment.slice(tag.length + 1))) : Option.none()
}

/**
 * The parts a key was made from, or none if `key` was not made by `make`.
 *
 * @since 0.1.0
 * @category Parsing
 */
export const parse = (key: string): Option.Option<KeyParts> => {
  const segments = key.split("/")
  if (segments.length !== 6 || segments[0] !== PREFIX) return Option.none()
  const [, channel, account, conversation, t, s] = segments as [string, string, string, string, string, string]
  const thread = readOptional("t", t)
  const sender = readOptional("s", s)
  if (Option.isNone(thread) || Option.isNone(sender)) return Option.none()
  return Option.some({
    channel: decodeComponent(channel),
    account: decodeComponent(account),
    conversation: decodeComponent(conversation),
    ...(thread.value === undefined ? {} : { thread: thread.value }),
    ...(sender.value === undefined ? {} : { sender: sender.value })
  })
}

/** A platform identity: who sent a message, on which channel and account. @since 0.1.0 @category Models */
export interface Identity {
  readonly channel: string
  readonly account: string
  readonly senderId: string
}

/**
 * The prefix of every per-identity principal. Pairing refuses to bind a principal that starts with
 * it, so a paired principal can never be confused with a stranger's per-identity one.
 *
 * @since 0.1.0
 * @category Constants
 */
export const IDENTITY_PRINCIPAL_PREFIX = "channel:"

/**
 * The principal a sender acts as on a channel whose DM (or group) policy is `allow` and who is not
 * paired: one principal per platform identity, so strangers never share sessions.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const identityPrincipal = (identity: Identity): string =>
  `${IDENTITY_PRINCIPAL_PREFIX}${encodeComponent(identity.channel)}:${encodeComponent(identity.account)}:${encodeComponent(identity.senderId)}`
