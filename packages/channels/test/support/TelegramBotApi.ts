/**
 * A local server on 127.0.0.1 that speaks the Telegram Bot API (the subset a bot uses): the
 * `/bot<token>/<method>` routes, the `{ ok, result }` / `{ ok: false, error_code, description,
 * parameters }` envelopes, long polling `getUpdates` (offset confirms, `timeout` holds the request),
 * `setWebhook` / `deleteWebhook` / `getWebhookInfo` (with the secret-token header on pushed
 * updates, and `getUpdates` refused with 409 while a webhook is set, as Telegram does), `getMe`, and
 * `sendMessage` (4,096-character limit, empty text refused). Tests push updates into it and read
 * what the bot sent.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { Effect, type Scope } from "effect"

export interface BotUser {
  readonly id: number
  readonly username: string
  readonly first_name: string
}

export interface SentMessage {
  readonly message_id: number
  readonly chat_id: number | string
  readonly text: string
  readonly message_thread_id?: number
  readonly reply_to?: number
  readonly at: number
}

export interface TelegramBotApi {
  /** The `apiRoot` to give grammY. */
  readonly apiRoot: string
  readonly token: string
  /** Queue an update (or post it to the webhook when one is set); its `update_id` is assigned. */
  readonly push: (update: Record<string, unknown>) => number
  /** Every successful `sendMessage`, in order. */
  readonly sent: Array<SentMessage>
  /** Every call: method and parameters. */
  readonly calls: Array<{ readonly method: string; readonly params: Record<string, unknown> }>
  /** Answer the next call of `method` with this error. */
  readonly failNext: (
    method: string,
    error: { readonly error_code: number; readonly description: string; readonly parameters?: Record<string, unknown> }
  ) => void
  /** HTTP statuses our webhook answered to each pushed update. */
  readonly webhookAnswers: Array<number>
  /** Post a raw update to the webhook with the given secret header (for forgeries). */
  readonly postToWebhook: (update: unknown, secret: string | undefined) => Promise<number>
}

let nextUserMessageId = 1000

/** A private-chat text message update from `from`. */
export const textMessage = (
  from: { readonly id: number; readonly username?: string; readonly first_name?: string },
  text: string,
  chat?: { readonly id: number; readonly type: "private" | "group" | "supergroup"; readonly title?: string },
  extra: Record<string, unknown> = {}
) => ({
  message: {
    message_id: ++nextUserMessageId,
    date: Math.floor(Date.now() / 1000),
    chat: chat ?? { id: from.id, type: "private", first_name: from.first_name ?? "User" },
    from: { is_bot: false, first_name: "User", ...from },
    text,
    ...extra
  }
})

export const make = (options: { readonly token: string; readonly bot: BotUser }) =>
  Effect.gen(function* () {
    const pending: Array<Record<string, unknown>> = []
    let nextUpdateId = 1
    let nextMessageId = 1
    let webhook: { url: string; secret: string | undefined } | undefined
    const waiters = new Set<() => void>()
    const failures = new Map<
      string,
      Array<{ error_code: number; description: string; parameters?: Record<string, unknown> }>
    >()
    const sent: Array<SentMessage> = []
    const calls: TelegramBotApi["calls"] = []
    const webhookAnswers: Array<number> = []

    const postToWebhook = async (update: unknown, secret: string | undefined) => {
      if (webhook === undefined) throw new Error("no webhook set")
      const response = await fetch(webhook.url, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          ...(secret === undefined ? {} : { "x-telegram-bot-api-secret-token": secret })
        },
        body: JSON.stringify(update)
      })
      await response.text()
      return response.status
    }

    const push = (update: Record<string, unknown>) => {
      const withId = { update_id: nextUpdateId++, ...update }
      if (webhook !== undefined) {
        postToWebhook(withId, webhook.secret).then(
          (status) => webhookAnswers.push(status),
          () => webhookAnswers.push(0)
        )
      } else {
        pending.push(withId)
        for (const wake of waiters) wake()
      }
      return withId.update_id as number
    }

    const ok = (res: ServerResponse, result: unknown) => send(res, 200, { ok: true, result })
    const error = (
      res: ServerResponse,
      e: { error_code: number; description: string; parameters?: Record<string, unknown> }
    ) => send(res, e.error_code, { ok: false, ...e })
    const send = (res: ServerResponse, status: number, body: unknown) => {
      if (res.writableEnded || res.destroyed) return
      const text = JSON.stringify(body)
      res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) })
      res.end(text)
    }

    const readParams = async (req: IncomingMessage, url: URL): Promise<Record<string, unknown>> => {
      const chunks: Array<Buffer> = []
      for await (const chunk of req) chunks.push(chunk as Buffer)
      const body = Buffer.concat(chunks).toString("utf8")
      const params: Record<string, unknown> = Object.fromEntries(url.searchParams)
      if (body.length === 0) return params
      const type = req.headers["content-type"] ?? ""
      if (type.includes("application/json")) return { ...params, ...(JSON.parse(body) as Record<string, unknown>) }
      if (type.includes("x-www-form-urlencoded")) return { ...params, ...Object.fromEntries(new URLSearchParams(body)) }
      throw new Error(`unsupported content type ${type}`)
    }

    const handle = async (req: IncomingMessage, res: ServerResponse) => {
      const url = new URL(req.url ?? "/", "http://localhost")
      const match = /^\/bot([^/]+)\/([A-Za-z]+)$/.exec(url.pathname)
      if (match === null) return error(res, { error_code: 404, description: "Not Found" })
      if (match[1] !== options.token) return error(res, { error_code: 401, description: "Unauthorized" })
      const method = match[2]!
      const params = await readParams(req, url)
      calls.push({ method, params })
      const failure = failures.get(method)?.shift()
      if (failure !== undefined) return error(res, failure)
      switch (method) {
        case "getMe":
          return ok(res, {
            ...options.bot,
            is_bot: true,
            can_join_groups: true,
            can_read_all_group_messages: false,
            supports_inline_queries: false,
            can_connect_to_business: false,
            has_main_web_app: false
          })
        case "deleteWebhook":
          webhook = undefined
          if (params.drop_pending_updates === true) pending.length = 0
          return ok(res, true)
        case "setWebhook":
          if (typeof params.url !== "string")
            return error(res, { error_code: 400, description: "Bad Request: bad webhook: URL is empty" })
          webhook = {
            url: params.url,
            secret: typeof params.secret_token === "string" ? params.secret_token : undefined
          }
          for (const update of pending.splice(0)) push(update)
          return ok(res, true)
        case "getWebhookInfo":
          return ok(res, {
            url: webhook?.url ?? "",
            has_custom_certificate: false,
            pending_update_count: pending.length
          })
        case "getUpdates": {
          if (webhook !== undefined) {
            return error(res, {
              error_code: 409,
              description:
                "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first"
            })
          }
          const offset = Number(params.offset ?? 0)
          const limit = Math.min(100, Number(params.limit ?? 100))
          const timeout = Number(params.timeout ?? 0)
          // An offset confirms every update before it.
          while (pending.length > 0 && (pending[0]!.update_id as number) < offset) pending.shift()
          if (pending.length === 0 && timeout > 0) {
            await new Promise<void>((resolve) => {
              const timer = setTimeout(done, timeout * 1000)
              function done() {
                clearTimeout(timer)
                waiters.delete(done)
                resolve()
              }
              waiters.add(done)
              req.socket.once("close", done)
            })
          }
          return ok(res, pending.slice(0, limit))
        }
        case "sendMessage": {
          const text = typeof params.text === "string" ? params.text : ""
          if (text.length === 0)
            return error(res, { error_code: 400, description: "Bad Request: message text is empty" })
          if (text.length > 4096)
            return error(res, { error_code: 400, description: "Bad Request: message is too long" })
          const chatId = params.chat_id as number | string
          const reply = params.reply_parameters as { message_id?: number } | undefined
          const message: SentMessage = {
            message_id: nextMessageId++,
            chat_id: chatId,
            text,
            ...(typeof params.message_thread_id === "number" ? { message_thread_id: params.message_thread_id } : {}),
            ...(reply?.message_id === undefined ? {} : { reply_to: reply.message_id }),
            at: Date.now()
          }
          sent.push(message)
          return ok(res, {
            message_id: message.message_id,
            date: Math.floor(message.at / 1000),
            chat: { id: chatId, type: "private" },
            from: { ...options.bot, is_bot: true },
            text
          })
        }
        default:
          return error(res, { error_code: 404, description: "Not Found: method not found" })
      }
    }

    const server = createServer((req, res) => {
      handle(req, res).catch((e) => send(res, 500, { ok: false, error_code: 500, description: String(e) }))
    })
    yield* Effect.acquireRelease(
      Effect.async<void>((resume) => {
        server.listen(0, "127.0.0.1", () => resume(Effect.void))
      }),
      () =>
        Effect.async<void>((resume) => {
          for (const wake of waiters) wake()
          server.close(() => resume(Effect.void))
          server.closeAllConnections()
        })
    )
    const port = (server.address() as AddressInfo).port
    const api: TelegramBotApi = {
      apiRoot: `http://127.0.0.1:${port}`,
      token: options.token,
      push,
      sent,
      calls,
      failNext: (method, e) => {
        const list = failures.get(method) ?? []
        list.push(e)
        failures.set(method, list)
      },
      webhookAnswers,
      postToWebhook
    }
    return api
  }) satisfies Effect.Effect<TelegramBotApi, never, Scope.Scope>
