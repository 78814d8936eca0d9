/**
 * Telegram, through grammY (the maintained Bot API framework): long polling (`getUpdates`, via
 * `bot.start`) or a webhook (`setWebhook` with a secret token, answered by grammY's
 * `webhookCallback`, which compares the token in constant time). The Bot API base URL is grammY's
 * `client.apiRoot`, so a local Bot API server (or a test double speaking the same API) works.
 *
 * Updates become `InboundMessage` candidates: chat id → conversation, forum topic → thread,
 * `private` chats → direct, `@mention` / `text_mention` entities → mentions, media → attachment
 * metadata, and `<chat id>:<message id>` → the platform message id (Telegram's message ids are per
 * chat). Replies are plain text (no parse mode, so nothing in a reply is read as markup), answer the
 * message they reply to, and split at Telegram's 4,096-character limit by the outbox. Telegram's 429
 * carries `retry_after`, which the outbox honours. The Bot API cannot look a sent message up, so a
 * delivery whose outcome is unknown after a crash stays marked rather than being sent twice.
 *
 * @since 0.1.0
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { Deferred, Effect, FiberSet, Redacted, type Scope } from "effect"
import { Bot, GrammyError, HttpError, webhookCallback } from "grammy"
import type { Message, MessageEntity } from "grammy/types"
import { type Connector, ConnectorError, RateLimited, SendFailed, type Sink } from "../Connector.js"
import type * as Inbound from "../InboundMessage.js"
import { readBody } from "./internal/http.js"

/** @since 0.1.0 @category Models */
export type Mode =
  | { readonly _tag: "polling"; readonly timeoutSeconds?: number | undefined }
  | {
      readonly _tag: "webhook"
      /**
       * The URL Telegram posts updates to (it reaches `listen` through your proxy). Default: the
       * listener's own URL, right for a Bot API server on the same host.
       */
      readonly url?: string | undefined
      /** Sent by Telegram in `X-Telegram-Bot-Api-Secret-Token`: 1–256 of A-Z a-z 0-9 _ -. */
      readonly secretToken: Redacted.Redacted<string>
      readonly listen: { readonly host?: string | undefined; readonly port: number; readonly path?: string | undefined }
    }

/** @since 0.1.0 @category Models */
export interface Options {
  readonly channel: string
  readonly token: Redacted.Redacted<string>
  /** The Bot API base URL (default `https://api.telegram.org`). */
  readonly apiRoot?: string | undefined
  readonly mode?: Mode | undefined
  /** Telegram's limit is 4,096. */
  readonly maxMessageLength?: number | undefined
  /** Largest webhook body accepted (default 1 MiB). */
  readonly maxBodyBytes?: number | undefined
}

/** @since 0.1.0 @category Models */
export interface TelegramConnector extends Connector {
  /** The bot, as `getMe` described it. */
  readonly bot: { readonly id: number; readonly username: string }
}

/** grammY's Node build types signals with the `abort-controller` shim; the native one works at runtime. */
type GrammySignal = NonNullable<Parameters<Bot["init"]>[0]>
const signalOf = (signal: AbortSignal) => signal as unknown as GrammySignal

const entityText = (text: string, e: MessageEntity) => text.slice(e.offset, e.offset + e.length)

const attachmentsOf = (m: Message): Array<Inbound.Attachment> => {
  const out: Array<Inbound.Attachment> = []
  const add = (a: Inbound.Attachment) => out.push(a)
  const opt = <K extends string, V>(key: K, value: V | undefined) =>
    (value === undefined ? {} : { [key]: value }) as { [P in K]?: V }
  if (m.photo !== undefined && m.photo.length > 0) {
    const largest = m.photo[m.photo.length - 1]!
    add({ kind: "image", id: largest.file_id, ...opt("size", largest.file_size) })
  }
  if (m.document !== undefined) {
    add({
      kind: "file",
      id: m.document.file_id,
      ...opt("name", m.document.file_name),
      ...opt("mimeType", m.document.mime_type),
      ...opt("size", m.document.file_size)
    })
  }
  for (const [kind, media] of [
    ["audio", m.audio],
    ["audio", m.voice],
    ["video", m.video],
    ["video", m.video_note]
  ] as const) {
    if (media !== undefined) add({ kind, id: media.file_id, ...opt("size", media.file_size) })
  }
  if (m.sticker !== undefined) add({ kind: "sticker", id: m.sticker.file_id })
  if (m.location !== undefined) add({ kind: "location" })
  return out
}

/**
 * A Telegram message as an `InboundMessage` candidate (the router decodes it; a message without a
 * sender, e.g. a channel post, does not decode and is counted as malformed).
 *
 * @since 0.1.0
 * @category Conversion
 */
export const toCandidate = (channel: string, account: string, m: Message): unknown => {
  const text = m.text ?? m.caption ?? ""
  const entities = m.entities ?? m.caption_entities ?? []
  const mentions = entities.flatMap((e) =>
    e.type === "mention" ? [entityText(text, e).toLowerCase()] : e.type === "text_mention" ? [String(e.user.id)] : []
  )
  const from = m.from
  return {
    channel,
    account,
    conversation: String(m.chat.id),
    thread: m.is_topic_message === true && m.message_thread_id !== undefined ? String(m.message_thread_id) : undefined,
    sender:
      from === undefined
        ? undefined
        : {
            id: String(from.id),
            handle: from.username === undefined ? undefined : `@${from.username}`,
            display: [from.first_name, from.last_name].filter((s) => s !== undefined && s.length > 0).join(" "),
            // The Bot API authenticates the sender (over TLS with the bot token, or a secret-token webhook).
            verified: true
          },
    platformMessageId: `${m.chat.id}:${m.message_id}`,
    text,
    attachments: attachmentsOf(m),
    isDirect: m.chat.type === "private",
    mentions,
    receivedAt: m.date * 1000
  }
}

const classify = (cause: unknown): RateLimited | SendFailed => {
  if (cause instanceof GrammyError) {
    if (cause.error_code === 429) {
      return new RateLimited({
        retryAfterMs: (cause.parameters.retry_after ?? 1) * 1000,
        message: cause.description
      })
    }
    return new SendFailed({
      outcome: cause.error_code >= 500 ? "unknown" : "not_sent",
      permanent: cause.error_code < 500,
      status: cause.error_code,
      message: cause.description
    })
  }
  if (cause instanceof HttpError) {
    const code = (cause.error as { code?: unknown } | undefined)?.code
    // Refused before a byte went out: certainly not sent. Anything else may have reached Telegram.
    return code === "ECONNREFUSED" || code === "ENOTFOUND"
      ? new SendFailed({ outcome: "not_sent", permanent: false, message: cause.message })
      : new SendFailed({ outcome: "unknown", permanent: false, message: cause.message })
  }
  return new SendFailed({ outcome: "unknown", permanent: false, message: String(cause) })
}

const status = (res: ServerResponse, code: number) => {
  if (res.headersSent) return
  res.writeHead(code, { "content-type": "application/json" })
  res.end(code < 300 ? "{}" : JSON.stringify({ error: code }))
}

/**
 * Connect to the Bot API (`getMe`; a bad token fails here with `ConnectorError`). Receiving starts
 * with `start`; polling stops and the webhook server closes with the scope.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = (options: Options): Effect.Effect<TelegramConnector, ConnectorError, Scope.Scope> =>
  Effect.gen(function* () {
    const fail = (message: string) => (cause: unknown) =>
      new ConnectorError({
        channel: options.channel,
        message: `${message}: ${cause instanceof Error ? cause.message : String(cause)}`,
        cause
      })
    const bot = new Bot(Redacted.value(options.token), {
      client: { ...(options.apiRoot === undefined ? {} : { apiRoot: options.apiRoot.replace(/\/+$/, "") }) }
    })
    yield* Effect.tryPromise({ try: (signal) => bot.init(signalOf(signal)), catch: fail("Telegram getMe failed") })
    const me = bot.botInfo
    const account = String(me.id)
    const mode: Mode = options.mode ?? { _tag: "polling" }
    const run = yield* FiberSet.makeRuntimePromise<never>()
    let webhookListenUrl: string | undefined

    const start = (sink: Sink): Effect.Effect<void, ConnectorError, Scope.Scope> =>
      Effect.gen(function* () {
        bot.on("message", async (ctx) => {
          const result = await run(sink.receive(toCandidate(options.channel, account, ctx.message)))
          // Not handled now: make the webhook answer an error so Telegram retries it.
          if (result === "failed") throw new Error("the message could not be handled now")
        })
        bot.catch((error) => run(Effect.logError("Telegram update failed", error.error)).catch(() => undefined))
        if (mode._tag === "polling") {
          const started = yield* Deferred.make<void, ConnectorError>()
          yield* Effect.acquireRelease(
            Effect.sync(() =>
              bot
                .start({
                  allowed_updates: ["message"],
                  timeout: mode.timeoutSeconds ?? 30,
                  onStart: () => void Deferred.unsafeDone(started, Effect.void)
                })
                .catch((cause) => {
                  Deferred.unsafeDone(started, Effect.fail(fail("Telegram polling stopped")(cause)))
                  return run(Effect.logError("Telegram polling stopped", cause)).catch(() => undefined)
                })
            ),
            (polling) =>
              Effect.promise(async () => {
                await bot.stop().catch(() => undefined)
                await polling
              }).pipe(Effect.timeout("10 seconds"), Effect.ignore)
          )
          yield* Deferred.await(started)
          return
        }
        const path = mode.listen.path ?? "/telegram"
        const maxBody = options.maxBodyBytes ?? 1024 * 1024
        const callback = webhookCallback(bot, "callback", {
          secretToken: Redacted.value(mode.secretToken),
          onTimeout: "return",
          timeoutMilliseconds: 25_000
        })
        const handle = async (req: IncomingMessage, res: ServerResponse) => {
          if (new URL(req.url ?? "/", "http://localhost").pathname !== path) return status(res, 404)
          if (req.method !== "POST") return status(res, 405)
          const body = await readBody(req, maxBody)
          if (body === "too_large") return status(res, 413)
          let update: unknown
          try {
            update = JSON.parse(body.toString("utf8"))
          } catch {
            await run(sink.refuse("malformed"))
            return status(res, 400)
          }
          const header = req.headers["x-telegram-bot-api-secret-token"]
          let unauthorized = false
          await callback(
            update as Parameters<typeof callback>[0],
            () => undefined,
            Array.isArray(header) ? header[0] : header,
            () => {
              unauthorized = true
            }
          )
          if (unauthorized) {
            await run(sink.refuse("bad_signature"))
            return status(res, 401)
          }
          return status(res, 200)
        }
        const server = createServer((req, res) => {
          handle(req, res).catch(() => status(res, 500))
        })
        yield* Effect.acquireRelease(
          Effect.async<void, ConnectorError>((resume) => {
            server.once("error", (cause) => resume(Effect.fail(fail("cannot listen")(cause))))
            server.listen(mode.listen.port, mode.listen.host ?? "127.0.0.1", () => resume(Effect.void))
          }),
          () =>
            Effect.async<void>((resume) => {
              server.close(() => resume(Effect.void))
              server.closeAllConnections()
            })
        )
        const address = server.address() as AddressInfo
        webhookListenUrl = `http://${address.family === "IPv6" ? `[${address.address}]` : address.address}:${address.port}${path}`
        yield* Effect.tryPromise({
          try: (signal) =>
            bot.api.setWebhook(
              mode.url ?? webhookListenUrl!,
              { secret_token: Redacted.value(mode.secretToken), allowed_updates: ["message"] },
              signalOf(signal)
            ),
          catch: fail("Telegram setWebhook failed")
        })
      })

    const send: Connector["send"] = (message) => {
      const chatId = /^-?\d+$/.test(message.conversation) ? Number(message.conversation) : message.conversation
      const replyTo =
        message.replyTo === null ? undefined : Number(message.replyTo.slice(message.replyTo.lastIndexOf(":") + 1))
      const thread = message.thread === null ? undefined : Number(message.thread)
      return Effect.tryPromise({
        try: (signal) =>
          bot.api.sendMessage(
            chatId,
            message.text,
            {
              link_preview_options: { is_disabled: true },
              ...(thread === undefined || Number.isNaN(thread) ? {} : { message_thread_id: thread }),
              ...(replyTo === undefined || Number.isNaN(replyTo)
                ? {}
                : { reply_parameters: { message_id: replyTo, allow_sending_without_reply: true } })
            },
            signalOf(signal)
          ),
        catch: classify
      }).pipe(Effect.map((sent) => ({ platformMessageId: `${sent.chat.id}:${sent.message_id}` })))
    }

    const connector: TelegramConnector = {
      channel: options.channel,
      kind: "telegram",
      maxMessageLength: options.maxMessageLength ?? 4096,
      self: { mentionPatterns: [`@${me.username}`], mentionIds: [`@${me.username}`.toLowerCase(), account] },
      bot: { id: me.id, username: me.username },
      /** In webhook mode, once started: the local URL the webhook server listens on. */
      get inboundUrl() {
        return webhookListenUrl
      },
      start,
      send,
      // The Bot API cannot tell whether a message was sent: leave it marked, never send it twice.
      reconcile: () => Effect.succeed("unknown" as const)
    }
    return connector
  }).pipe(Effect.withSpan("Telegram.make"))
