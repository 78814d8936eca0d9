/**
 * The `[[channels]]` entries of `palyra.toml` (snake_case, as written in TOML), validated with
 * Schema. Secrets (bot tokens, webhook secret tokens, signing secrets) are listed by `secrets` so the
 * daemon adds them to its redaction literals.
 *
 * ```toml
 * [[channels]]
 * name = "tg"
 * kind = "telegram"
 * bot_token = "123456:ABC…"
 * dm_policy = "pairing"          # deny | pairing | allow
 *
 * [[channels]]
 * name = "hooks"
 * kind = "webhook"
 * signing_secret = "…at least 32 characters…"
 * listen_port = 7430
 * callback_url = "https://example.com/palyra-replies"
 *
 * [[channels]]
 * name = "slack"
 * kind = "slack"
 * signing_secret = "…"            # Basic Information → App Credentials
 * bot_token = "xoxb-…"             # OAuth & Permissions
 * listen_port = 7431               # Event Subscriptions → Request URL reaches this
 * ```
 *
 * @since 0.1.0
 */
import { Duration, Redacted, Schema } from "effect"
import type * as SignedWebhook from "./connectors/SignedWebhook.js"
import type * as Slack from "./connectors/Slack.js"
import type * as Telegram from "./connectors/Telegram.js"
import { ChannelName } from "./InboundMessage.js"
import type { ChannelSettings } from "./Settings.js"

const Positive = Schema.Int.pipe(Schema.positive({ message: () => "must be a positive whole number" }))
const NonNegative = Schema.Int.pipe(Schema.nonNegative({ message: () => "must be zero or a positive whole number" }))
const Port = Schema.Int.pipe(Schema.between(0, 65535, { message: () => "must be a port number (0–65535)" }))
const HttpUrl = Schema.String.pipe(
  Schema.filter((s) => URL.canParse(s) && /^https?:$/.test(new URL(s).protocol), {
    message: () => "must be an http(s) URL"
  })
)
const Path = Schema.String.pipe(
  Schema.pattern(/^\/[A-Za-z0-9/_.-]*$/, { message: () => "must be a path like /inbound" })
)

const common = {
  name: ChannelName,
  enabled: Schema.optionalWith(Schema.Boolean, { default: () => true }),
  dm_policy: Schema.optional(Schema.Literal("deny", "pairing", "allow")),
  group_policy: Schema.optional(Schema.Literal("paired", "allow")),
  mention_patterns: Schema.optional(Schema.Array(Schema.String.pipe(Schema.minLength(1)))),
  require_mention: Schema.optional(Schema.Boolean),
  allow_from: Schema.optional(Schema.Array(Schema.String)),
  deny_from: Schema.optional(Schema.Array(Schema.String)),
  isolate_session_by_sender: Schema.optional(Schema.Boolean),
  broadcast: Schema.optional(Schema.Literal("deny", "mentionOnly", "allow")),
  response_prefix: Schema.optional(Schema.String.pipe(Schema.maxLength(64))),
  max_concurrent: Schema.optional(Positive),
  max_queue: Schema.optional(Positive),
  max_text_chars: Schema.optional(Positive),
  allow_unverified: Schema.optional(Schema.Boolean),
  commands: Schema.optional(Schema.Boolean),
  coalesce_ms: Schema.optional(NonNegative),
  pairing_code_ttl_seconds: Schema.optional(Positive),
  pairing_max_failures: Schema.optional(Positive),
  pairing_lockout_seconds: Schema.optional(Positive),
  pairing_hint_interval_seconds: Schema.optional(Positive),
  binding_ttl_seconds: Schema.optional(Positive),
  pairing_channel_max_failures: Schema.optional(Positive),
  pairing_channel_window_seconds: Schema.optional(Positive),
  pairing_channel_lockout_seconds: Schema.optional(Positive)
}

/** A Telegram bot. @since 0.1.0 @category Schema */
export const TelegramEntry = Schema.Struct({
  kind: Schema.Literal("telegram"),
  ...common,
  /** Secret. */
  bot_token: Schema.String.pipe(
    Schema.pattern(/^\d{1,20}:[A-Za-z0-9_-]{20,}$/, { message: () => "must be a Telegram bot token (<id>:<secret>)" })
  ),
  api_root: Schema.optional(HttpUrl),
  mode: Schema.optionalWith(Schema.Literal("polling", "webhook"), { default: () => "polling" as const }),
  poll_timeout_seconds: Schema.optional(Schema.Int.pipe(Schema.between(0, 50))),
  webhook_url: Schema.optional(HttpUrl),
  /** Secret. */
  webhook_secret: Schema.optional(
    Schema.String.pipe(
      Schema.pattern(/^[A-Za-z0-9_-]{16,256}$/, { message: () => "must be 16–256 characters of A-Z a-z 0-9 _ -" })
    )
  ),
  listen_host: Schema.optionalWith(Schema.String, { default: () => "127.0.0.1" }),
  listen_port: Schema.optional(Port),
  webhook_path: Schema.optional(Path)
}).pipe(
  Schema.filter(
    (e) =>
      e.mode === "polling" ||
      (e.webhook_secret !== undefined && e.listen_port !== undefined) ||
      "webhook mode needs webhook_secret and listen_port (and webhook_url unless the Bot API server is local)"
  )
)
/** @since 0.1.0 @category Schema */
export type TelegramEntry = typeof TelegramEntry.Type

/** A generic signed webhook. @since 0.1.0 @category Schema */
export const WebhookEntry = Schema.Struct({
  kind: Schema.Literal("webhook"),
  ...common,
  /** Secret. */
  signing_secret: Schema.String.pipe(Schema.minLength(32, { message: () => "must be at least 32 characters" })),
  callback_url: Schema.optional(HttpUrl),
  listen_host: Schema.optionalWith(Schema.String, { default: () => "127.0.0.1" }),
  listen_port: Port,
  path: Schema.optional(Path),
  replay_window_seconds: Schema.optional(Positive),
  max_body_bytes: Schema.optional(Positive),
  max_message_length: Schema.optional(Schema.Int.pipe(Schema.between(16, 1_000_000)))
})
/** @since 0.1.0 @category Schema */
export type WebhookEntry = typeof WebhookEntry.Type

/** A Slack app (Events API in, Web API out). @since 0.1.0 @category Schema */
export const SlackEntry = Schema.Struct({
  kind: Schema.Literal("slack"),
  ...common,
  /** Secret. */
  signing_secret: Schema.String.pipe(
    Schema.pattern(/^[A-Za-z0-9]{16,128}$/, { message: () => "must be the app's signing secret (letters and digits)" })
  ),
  /** Secret. */
  bot_token: Schema.String.pipe(
    Schema.pattern(/^xox[bp]-[A-Za-z0-9-]{10,}$/, { message: () => "must be a Slack bot token (xoxb-…)" })
  ),
  api_root: Schema.optional(HttpUrl),
  listen_host: Schema.optionalWith(Schema.String, { default: () => "127.0.0.1" }),
  listen_port: Port,
  path: Schema.optional(Path),
  replay_window_seconds: Schema.optional(Positive),
  max_body_bytes: Schema.optional(Positive),
  max_message_length: Schema.optional(Schema.Int.pipe(Schema.between(16, 40_000)))
})
/** @since 0.1.0 @category Schema */
export type SlackEntry = typeof SlackEntry.Type

/** One `[[channels]]` entry. @since 0.1.0 @category Schema */
export const Entry = Schema.Union(TelegramEntry, WebhookEntry, SlackEntry)
/** @since 0.1.0 @category Schema */
export type Entry = typeof Entry.Type

/** The whole `channels` array: names must be unique. @since 0.1.0 @category Schema */
export const Entries = Schema.Array(Entry).pipe(
  Schema.filter((entries) => {
    const seen = new Set<string>()
    for (const e of entries) {
      if (seen.has(e.name)) return `channel name "${e.name}" is used twice`
      seen.add(e.name)
    }
    return true
  })
)

/**
 * Every secret in the entries, for the daemon's redaction literals.
 *
 * @since 0.1.0
 * @category Secrets
 */
export const secrets = (entries: ReadonlyArray<Entry>): ReadonlyArray<string> =>
  entries.flatMap((e) =>
    e.kind === "telegram"
      ? [e.bot_token, ...(e.webhook_secret === undefined ? [] : [e.webhook_secret])]
      : e.kind === "slack"
        ? [e.signing_secret, e.bot_token]
        : [e.signing_secret]
  )

const seconds = (n: number | undefined) => (n === undefined ? undefined : Duration.seconds(n))

/** The router's settings for an entry. @since 0.1.0 @category Conversion */
export const toSettings = (e: Entry): ChannelSettings => ({
  name: e.name,
  enabled: e.enabled,
  dmPolicy: e.dm_policy,
  groupPolicy: e.group_policy,
  mentionPatterns: e.mention_patterns,
  requireMention: e.require_mention,
  allowFrom: e.allow_from,
  denyFrom: e.deny_from,
  isolateSessionBySender: e.isolate_session_by_sender,
  broadcast: e.broadcast,
  responsePrefix: e.response_prefix,
  maxConcurrent: e.max_concurrent,
  maxQueue: e.max_queue,
  maxTextChars: e.max_text_chars,
  allowUnverified: e.allow_unverified,
  commands: e.commands,
  coalesce: { window: e.coalesce_ms === undefined ? undefined : Duration.millis(e.coalesce_ms) },
  pairing: {
    codeTtl: seconds(e.pairing_code_ttl_seconds),
    maxFailures: e.pairing_max_failures,
    lockout: seconds(e.pairing_lockout_seconds),
    hintInterval: seconds(e.pairing_hint_interval_seconds),
    bindingTtl: seconds(e.binding_ttl_seconds),
    channelMaxFailures: e.pairing_channel_max_failures,
    channelFailureWindow: seconds(e.pairing_channel_window_seconds),
    channelLockout: seconds(e.pairing_channel_lockout_seconds)
  }
})

/** The Telegram connector's options for an entry. @since 0.1.0 @category Conversion */
export const telegramOptions = (e: TelegramEntry): Telegram.Options => ({
  channel: e.name,
  token: Redacted.make(e.bot_token),
  apiRoot: e.api_root,
  mode:
    e.mode === "webhook"
      ? {
          _tag: "webhook",
          url: e.webhook_url,
          secretToken: Redacted.make(e.webhook_secret!),
          listen: { host: e.listen_host, port: e.listen_port!, path: e.webhook_path }
        }
      : { _tag: "polling", timeoutSeconds: e.poll_timeout_seconds }
})

/** The signed webhook connector's options for an entry. @since 0.1.0 @category Conversion */
export const webhookOptions = (e: WebhookEntry): SignedWebhook.Options => ({
  channel: e.name,
  signingSecret: Redacted.make(e.signing_secret),
  listen: { host: e.listen_host, port: e.listen_port, path: e.path },
  callbackUrl: e.callback_url,
  replayWindow: seconds(e.replay_window_seconds),
  maxBodyBytes: e.max_body_bytes,
  maxMessageLength: e.max_message_length
})

/** The Slack connector's options for an entry. @since 0.1.0 @category Conversion */
export const slackOptions = (e: SlackEntry): Slack.Options => ({
  channel: e.name,
  signingSecret: Redacted.make(e.signing_secret),
  botToken: Redacted.make(e.bot_token),
  apiRoot: e.api_root,
  listen: { host: e.listen_host, port: e.listen_port, path: e.path },
  replayWindow: seconds(e.replay_window_seconds),
  maxBodyBytes: e.max_body_bytes,
  maxMessageLength: e.max_message_length
})
