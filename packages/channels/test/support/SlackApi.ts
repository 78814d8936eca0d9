/**
 * A local server on 127.0.0.1 that speaks Slack's Web API (the subset a bot uses) and plays Slack's
 * Events API side: `POST /api/<method>` with a form-encoded or JSON body and the token in
 * `Authorization: Bearer`; answers `{ ok: true, … }` or `{ ok: false, error }` (HTTP 200, as Slack
 * does), `invalid_auth` for a wrong token, HTTP 429 with `Retry-After` when told to rate limit;
 * `auth.test`, `chat.postMessage` (`channel_not_found`, `no_text`, 40,000-character limit,
 * `thread_ts` and `metadata` kept), `conversations.history` and `conversations.replies` (newest
 * first, `oldest`, `limit` with `has_more`, metadata only with `include_all_metadata`). Tests sign and post events to the app's Request URL like Slack does.
 */
import { createHmac } from "node:crypto"
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { Effect, type Scope } from "effect"

export interface Posted {
  readonly channel: string
  readonly text: string
  readonly thread_ts?: string
  readonly ts: string
  readonly at: number
  readonly metadata?: { readonly event_type: string; readonly event_payload: Record<string, unknown> }
}

export interface SlackApi {
  /** The `api_root` to give the connector (ends with `/api/`). */
  readonly apiRoot: string
  /** Every successful `chat.postMessage`, in order. */
  readonly posted: Array<Posted>
  /** Every call: method, parameters and when it came. */
  readonly calls: Array<{ readonly method: string; readonly params: Record<string, unknown>; readonly at: number }>
  /** Answer the next call of `method` with HTTP 429 and this `Retry-After` (seconds). */
  readonly rateLimitNext: (method: string, retryAfterSeconds: number) => void
  /** Sign and post an Events API payload to `url`, as Slack would (override the headers to forge). */
  readonly deliver: (
    url: string,
    payload: unknown,
    options?: {
      readonly secret?: string
      readonly timestamp?: number
      readonly retryNum?: number
      readonly signature?: string
    }
  ) => Promise<{ readonly status: number; readonly body: string }>
}

export interface SlackApiOptions {
  readonly token: string
  readonly signingSecret: string
  readonly bot: { readonly userId: string; readonly teamId: string; readonly botId: string }
  /** Conversations that exist (default: any id starting with C, D or G). */
  readonly conversations?: ReadonlyArray<string>
  /** Messages already in the conversations (e.g. posted by a previous process). */
  readonly history?: Array<Posted>
}

const read = (req: IncomingMessage) =>
  new Promise<string>((resolve, reject) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")))
    req.on("error", reject)
  })

const send = (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
  res.writeHead(status, { "content-type": "application/json; charset=utf-8", ...headers })
  res.end(JSON.stringify(body))
}

let seq = 0

/** A fresh Slack message timestamp: the current second and a unique, increasing fraction. */
export const nextTs = () => `${Math.floor(Date.now() / 1000)}.${String(++seq % 1_000_000).padStart(6, "0")}`

/** An `event_callback` envelope around a `message` event. */
export const messageEvent = (fields: {
  readonly user: string
  readonly text: string
  readonly channel: string
  readonly channelType?: "im" | "channel" | "group"
  readonly ts?: string
  readonly threadTs?: string
  readonly type?: "message" | "app_mention"
  readonly eventId?: string
  readonly teamId?: string
  readonly extra?: Record<string, unknown>
}) => {
  const messageTs = fields.ts ?? nextTs()
  return {
    token: "legacy-verification-token",
    team_id: fields.teamId ?? "T0001",
    api_app_id: "A0001",
    type: "event_callback",
    event_id: fields.eventId ?? `Ev${messageTs.replace(".", "")}`,
    event_time: Math.floor(Number(messageTs)),
    event: {
      type: fields.type ?? "message",
      channel: fields.channel,
      channel_type: fields.channelType ?? "im",
      user: fields.user,
      text: fields.text,
      ts: messageTs,
      event_ts: messageTs,
      ...(fields.threadTs === undefined ? {} : { thread_ts: fields.threadTs }),
      ...fields.extra
    }
  }
}

export const make = (options: SlackApiOptions): Effect.Effect<SlackApi, never, Scope.Scope> =>
  Effect.gen(function* () {
    const posted: Array<Posted> = []
    const calls: SlackApi["calls"] = []
    const limits = new Map<string, number>()
    const exists = (c: string) =>
      options.conversations === undefined ? /^[CDG][A-Z0-9]+$/.test(c) : options.conversations.includes(c)

    const handle = async (req: IncomingMessage, res: ServerResponse) => {
      const url = new URL(req.url ?? "/", "http://localhost")
      const method = url.pathname.startsWith("/api/") ? url.pathname.slice(5) : ""
      const raw = await read(req)
      const type = req.headers["content-type"] ?? ""
      let params: Record<string, unknown> = {}
      if (type.includes("application/json")) params = raw.length > 0 ? JSON.parse(raw) : {}
      else params = Object.fromEntries(new URLSearchParams(raw))
      calls.push({ method, params, at: Date.now() })
      const retryAfter = limits.get(method)
      if (retryAfter !== undefined) {
        limits.delete(method)
        return send(res, 429, { ok: false, error: "ratelimited" }, { "retry-after": String(retryAfter) })
      }
      const auth = req.headers.authorization ?? (typeof params.token === "string" ? `Bearer ${params.token}` : "")
      if (auth !== `Bearer ${options.token}`) return send(res, 200, { ok: false, error: "invalid_auth" })
      switch (method) {
        case "auth.test":
          return send(res, 200, {
            ok: true,
            url: "https://palyra-test.slack.com/",
            team: "Palyra Test",
            user: "palyra",
            team_id: options.bot.teamId,
            user_id: options.bot.userId,
            bot_id: options.bot.botId
          })
        case "chat.postMessage": {
          const channel = String(params.channel ?? "")
          const text = typeof params.text === "string" ? params.text : ""
          if (!exists(channel)) return send(res, 200, { ok: false, error: "channel_not_found" })
          if (text.length === 0) return send(res, 200, { ok: false, error: "no_text" })
          if (text.length > 40_000) return send(res, 200, { ok: false, error: "msg_too_long" })
          const metadata =
            typeof params.metadata === "string"
              ? JSON.parse(params.metadata)
              : typeof params.metadata === "object" && params.metadata !== null
                ? params.metadata
                : undefined
          const message: Posted = {
            channel,
            text,
            ts: nextTs(),
            at: Date.now(),
            ...(metadata === undefined ? {} : { metadata }),
            ...(typeof params.thread_ts === "string" && params.thread_ts.length > 0
              ? { thread_ts: params.thread_ts }
              : {})
          }
          posted.push(message)
          return send(res, 200, {
            ok: true,
            channel,
            ts: message.ts,
            message: { type: "message", text, user: options.bot.userId, bot_id: options.bot.botId, ts: message.ts }
          })
        }
        case "conversations.history":
        case "conversations.replies": {
          const channel = String(params.channel ?? "")
          if (!exists(channel)) return send(res, 200, { ok: false, error: "channel_not_found" })
          const oldest = Number(params.oldest ?? 0)
          const limit = Number(params.limit ?? 100)
          const withMetadata = params.include_all_metadata === true || params.include_all_metadata === "true"
          const thread = method === "conversations.replies" ? String(params.ts ?? "") : undefined
          const matching = [...posted, ...(options.history ?? [])]
            .filter(
              (m) =>
                m.channel === channel &&
                Number(m.ts) > oldest &&
                (thread === undefined ? m.thread_ts === undefined : m.thread_ts === thread || m.ts === thread)
            )
            .sort((a, b) => Number(b.ts) - Number(a.ts))
          const page = matching.slice(0, limit)
          return send(res, 200, {
            ok: true,
            messages: page.map((m) => ({
              type: "message",
              text: m.text,
              ts: m.ts,
              ...(m.thread_ts === undefined ? {} : { thread_ts: m.thread_ts }),
              ...(withMetadata && m.metadata !== undefined ? { metadata: m.metadata } : {})
            })),
            has_more: matching.length > page.length
          })
        }
        default:
          return send(res, 200, { ok: false, error: "unknown_method" })
      }
    }

    const server = createServer((req, res) => {
      handle(req, res).catch(() => send(res, 500, { ok: false, error: "internal_error" }))
    })
    yield* Effect.acquireRelease(
      Effect.async<void>((resume) => {
        server.listen(0, "127.0.0.1", () => resume(Effect.void))
      }),
      () =>
        Effect.async<void>((resume) => {
          server.close(() => resume(Effect.void))
          server.closeAllConnections()
        })
    )
    const { port } = server.address() as AddressInfo

    const deliver: SlackApi["deliver"] = async (target, payload, o = {}) => {
      const body = JSON.stringify(payload)
      const timestamp = o.timestamp ?? Math.floor(Date.now() / 1000)
      const signature =
        o.signature ??
        `v0=${createHmac("sha256", o.secret ?? options.signingSecret)
          .update(`v0:${timestamp}:${body}`)
          .digest("hex")}`
      const response = await fetch(target, {
        method: "POST",
        body,
        headers: {
          "content-type": "application/json",
          "x-slack-request-timestamp": String(timestamp),
          "x-slack-signature": signature,
          ...(o.retryNum === undefined
            ? {}
            : { "x-slack-retry-num": String(o.retryNum), "x-slack-retry-reason": "http_timeout" })
        }
      })
      return { status: response.status, body: await response.text() }
    }

    return {
      apiRoot: `http://127.0.0.1:${port}/api/`,
      posted,
      calls,
      rateLimitNext: (method, seconds) => void limits.set(method, seconds),
      deliver
    }
  })
