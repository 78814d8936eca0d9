/**
 * A generic signed webhook: any system that can sign an HTTP request can talk to Palyra.
 *
 * **Inbound** — `POST <path>` with a JSON `InboundMessage` body (its `channel` is forced to this
 * connector's) and two headers:
 *
 * - `X-Palyra-Timestamp`: Unix time in seconds;
 * - `X-Palyra-Signature`: `v1=` + hex HMAC-SHA256(secret, `timestamp + "." + body`).
 *
 * The signature is compared in constant time (`crypto.timingSafeEqual`) over the raw bytes; a
 * timestamp outside the replay window (default 5 minutes either way) is refused even when its
 * signature is good, and a replay inside the window is a `duplicate` (the signature covers the
 * platform message id). Forged or stale → 401 and nothing is stored beyond a counter. Answers:
 * 202 accepted (including messages the router rejected: they were handled), 400 malformed, 401,
 * 404, 405, 413 (default limit 256 KiB), 503 when it cannot be handled now (retry).
 *
 * **Outbound** — replies are `POST`ed as JSON to `callbackUrl`, signed the same way, with an
 * `Idempotency-Key` header. The receiver must treat a repeated key as the same message; that is
 * what makes a resend after a crash safe (`reconcile` answers `resend`). 2xx: sent (a JSON `id` in
 * the answer is kept as the platform id); 429: rate limited (honouring `Retry-After`); other 4xx:
 * failed for good; 5xx and network errors: retried with backoff.
 *
 * @since 0.1.0
 */
import { createHmac, timingSafeEqual } from "node:crypto"
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { Clock, Duration, Effect, FiberSet, Redacted, type Scope } from "effect"
import { type Connector, ConnectorError, RateLimited, SendFailed, type Sink } from "../Connector.js"
import { readBody } from "./internal/http.js"

/** @since 0.1.0 @category Models */
export interface Options {
  readonly channel: string
  readonly signingSecret: Redacted.Redacted<string>
  readonly listen: {
    readonly host?: string | undefined
    /** `0` picks a free port (see `url`). */
    readonly port: number
    readonly path?: string | undefined
  }
  /** Where replies go; without it, replies are stored and marked failed. */
  readonly callbackUrl?: string | undefined
  readonly replayWindow?: Duration.DurationInput | undefined
  readonly maxBodyBytes?: number | undefined
  readonly maxMessageLength?: number | undefined
  /** Timeout of one outbound request (default 10 seconds). */
  readonly sendTimeout?: Duration.DurationInput | undefined
}

/** @since 0.1.0 @category Models */
export interface SignedWebhookConnector extends Connector {
  /** The inbound URL the server listens on. */
  readonly inboundUrl: string
}

/**
 * The signature header value for `body` sent at `timestamp` (Unix seconds).
 *
 * @since 0.1.0
 * @category Signing
 */
export const sign = (secret: Redacted.Redacted<string>, timestamp: number, body: string | Uint8Array): string =>
  `v1=${createHmac("sha256", Redacted.value(secret)).update(`${timestamp}.`).update(body).digest("hex")}`

/** Why a request does not authenticate. @since 0.1.0 @category Signing */
export type VerifyFailure = "bad_signature" | "stale_signature"

/**
 * Check a request's timestamp and signature headers against its raw body, at `nowMs`.
 *
 * @since 0.1.0
 * @category Signing
 */
export const verify = (
  secret: Redacted.Redacted<string>,
  headers: { readonly timestamp: string | undefined; readonly signature: string | undefined },
  body: Uint8Array,
  nowMs: number,
  windowMs: number
): VerifyFailure | undefined => {
  const ts = headers.timestamp
  if (ts === undefined || !/^\d{1,12}$/.test(ts)) return "bad_signature"
  const sig = headers.signature
  if (sig === undefined || !/^v1=[0-9a-f]{64}$/.test(sig)) return "bad_signature"
  const expected = Buffer.from(sign(secret, Number(ts), body).slice(3), "hex")
  const given = Buffer.from(sig.slice(3), "hex")
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return "bad_signature"
  // Checked after the signature, so an attacker learns nothing about the clock from a forgery.
  if (Math.abs(nowMs - Number(ts) * 1000) > windowMs) return "stale_signature"
  return undefined
}

const reply = (res: ServerResponse, status: number, body: Record<string, unknown>) => {
  if (res.headersSent) return
  const text = JSON.stringify(body)
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) })
  res.end(text)
}

/** `Retry-After` as milliseconds (seconds or an HTTP date), default 1 second. */
const retryAfterMs = (value: string | null, now: number) => {
  if (value === null) return 1000
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000
  const at = Date.parse(value)
  return Number.isNaN(at) ? 1000 : Math.max(0, at - now)
}

/**
 * Start the inbound server (requests are answered 503 until `start` hands it a sink) and build the
 * connector. The server closes with the scope.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = (options: Options): Effect.Effect<SignedWebhookConnector, ConnectorError, Scope.Scope> =>
  Effect.gen(function* () {
    const path = options.listen.path ?? "/inbound"
    const windowMs = Duration.toMillis(Duration.decode(options.replayWindow ?? "5 minutes"))
    const maxBody = options.maxBodyBytes ?? 256 * 1024
    const timeoutMs = Duration.toMillis(Duration.decode(options.sendTimeout ?? "10 seconds"))
    const run = yield* FiberSet.makeRuntimePromise<never>()
    let sink: Sink | undefined

    const handle = async (req: IncomingMessage, res: ServerResponse) => {
      const url = new URL(req.url ?? "/", "http://localhost")
      if (url.pathname !== path) return reply(res, 404, { error: "not_found" })
      if (req.method !== "POST") return reply(res, 405, { error: "method_not_allowed" })
      if (sink === undefined) return reply(res, 503, { error: "unavailable" })
      const declared = Number(req.headers["content-length"] ?? "0")
      if (declared > maxBody) {
        res.setHeader("connection", "close")
        return reply(res, 413, { error: "payload_too_large" })
      }
      const body = await readBody(req, maxBody)
      if (body === "too_large") {
        res.setHeader("connection", "close")
        return reply(res, 413, { error: "payload_too_large" })
      }
      const header = (name: string) => {
        const v = req.headers[name]
        return Array.isArray(v) ? v[0] : v
      }
      const now = await run(Clock.currentTimeMillis)
      const failure = verify(
        options.signingSecret,
        { timestamp: header("x-palyra-timestamp"), signature: header("x-palyra-signature") },
        body,
        now,
        windowMs
      )
      if (failure !== undefined) {
        await run(sink.refuse(failure))
        return reply(res, 401, { error: "unauthenticated" })
      }
      let parsed: unknown
      try {
        parsed = JSON.parse(body.toString("utf8"))
      } catch {
        await run(sink.refuse("malformed"))
        return reply(res, 400, { error: "malformed" })
      }
      const candidate =
        typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)
          ? { ...parsed, channel: options.channel }
          : parsed
      const result = await run(sink.receive(candidate))
      if (result === "malformed") return reply(res, 400, { error: "malformed" })
      if (result === "failed") return reply(res, 503, { error: "unavailable" })
      return reply(res, 202, { status: "accepted" })
    }

    const server = createServer((req, res) => {
      handle(req, res).catch(() => reply(res, 500, { error: "internal" }))
    })
    server.requestTimeout = 30_000
    server.headersTimeout = 10_000
    yield* Effect.acquireRelease(
      Effect.async<void, ConnectorError>((resume) => {
        server.once("error", (cause) =>
          resume(
            Effect.fail(
              new ConnectorError({ channel: options.channel, message: `cannot listen: ${cause.message}`, cause })
            )
          )
        )
        server.listen(options.listen.port, options.listen.host ?? "127.0.0.1", () => resume(Effect.void))
      }),
      () =>
        Effect.async<void>((resume) => {
          server.close(() => resume(Effect.void))
          server.closeAllConnections()
        })
    )
    const address = server.address() as AddressInfo
    const host = address.family === "IPv6" ? `[${address.address}]` : address.address

    const send: Connector["send"] = (message) =>
      Effect.gen(function* () {
        if (options.callbackUrl === undefined) {
          return yield* new SendFailed({ outcome: "not_sent", permanent: true, message: "no callback_url configured" })
        }
        const body = JSON.stringify({
          idempotencyKey: message.key,
          channel: options.channel,
          account: message.account,
          conversation: message.conversation,
          thread: message.thread,
          replyTo: message.replyTo,
          text: message.text
        })
        const now = yield* Clock.currentTimeMillis
        const timestamp = Math.floor(now / 1000)
        const callbackUrl = options.callbackUrl
        const response = yield* Effect.tryPromise({
          try: (signal) =>
            fetch(callbackUrl, {
              method: "POST",
              body,
              signal: AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)]),
              headers: {
                "content-type": "application/json",
                "idempotency-key": message.key,
                "x-palyra-timestamp": String(timestamp),
                "x-palyra-signature": sign(options.signingSecret, timestamp, body)
              }
            }),
          catch: (cause) =>
            new SendFailed({
              outcome: "not_sent",
              permanent: false,
              message: `callback request failed: ${cause instanceof Error ? cause.message : String(cause)}`
            })
        })
        const text = yield* Effect.promise(() => response.text().catch(() => ""))
        if (response.status === 429) {
          return yield* new RateLimited({
            retryAfterMs: retryAfterMs(response.headers.get("retry-after"), now),
            message: "callback answered 429"
          })
        }
        if (response.status >= 400) {
          return yield* new SendFailed({
            outcome: "not_sent",
            permanent: response.status < 500 && response.status !== 408,
            status: response.status,
            message: `callback answered ${response.status}`
          })
        }
        let id: string | null = null
        try {
          const parsed = JSON.parse(text) as { id?: unknown }
          if (typeof parsed.id === "string" || typeof parsed.id === "number") id = String(parsed.id)
        } catch {
          // an answer without a JSON body is fine
        }
        return { platformMessageId: id }
      })

    return {
      channel: options.channel,
      kind: "webhook",
      maxMessageLength: options.maxMessageLength ?? 4000,
      self: { mentionPatterns: [], mentionIds: [] },
      inboundUrl: `http://${host}:${address.port}${path}`,
      start: (s) =>
        Effect.acquireRelease(
          Effect.sync(() => {
            sink = s
          }),
          () =>
            Effect.sync(() => {
              sink = undefined
            })
        ),
      send,
      // The receiver dedupes by Idempotency-Key, so sending again is safe.
      reconcile: () => Effect.succeed("resend" as const)
    }
  })
