/**
 * The HTTP transport: REST for runs, sessions, approvals and the journal; server-sent events for a
 * session's tape (resume with `Last-Event-ID` = tape_seq); JSON errors `{ code, message }` with the
 * right status; bearer-token auth on everything but `/healthz` and `/readyz`; request size limits;
 * an OpenAPI document at `/openapi.json`.
 *
 * Thin by design: every handler translates to one `Gateway` call.
 *
 * @since 0.1.0
 */

import { createServer } from "node:http"
import * as HttpIncomingMessage from "@effect/platform/HttpIncomingMessage"
import * as HttpRouter from "@effect/platform/HttpRouter"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Auth, type Caller as CallerT, Errors, Gateway, Ids, type Records, type TapeEvent } from "@palyra/core"
import { Cause, Clock, Deferred, Effect, Option, ParseResult, Schedule, Schema, Stream } from "effect"
import { openApiDocument } from "./internal/openapi.js"

/** @since 0.1.0 @category Models */
export type TokenGrant = Auth.TokenGrant

/** @since 0.1.0 @category Models */
export interface Options {
  readonly tokens: ReadonlyArray<TokenGrant>
  /** Largest request body, in bytes (default 1 MiB). */
  readonly maxBodyBytes?: number | undefined
  /** Seconds between SSE keep-alive comments (default 15). */
  readonly heartbeatSeconds?: number | undefined
  /** Readiness probe (default: always ready). */
  readonly ready?: Effect.Effect<boolean> | undefined
  /** Completes when the server shuts down: open event streams end cleanly then. */
  readonly shutdown?: Effect.Effect<void> | undefined
}

const errorResponse = (status: number, code: string, message: string) =>
  HttpServerResponse.unsafeJson({ code, message }, { status })

type Caller = CallerT.Caller

const MessageBody = Schema.Struct({
  text: Schema.String,
  sessionId: Schema.optional(Schema.String),
  sessionKey: Schema.optional(Schema.String),
  channel: Schema.optional(Schema.String)
})
const SessionBody = Schema.Struct({
  sessionKey: Schema.optional(Schema.String),
  title: Schema.optional(Schema.String),
  channel: Schema.optional(Schema.String)
})
const BranchBody = Schema.Struct({ atSeq: Schema.optional(Schema.Int), title: Schema.optional(Schema.String) })
const ApprovalBody = Schema.Struct({
  decision: Schema.Literal("approve", "deny"),
  scope: Schema.optional(Schema.Literal("once", "session", "always")),
  reason: Schema.optional(Schema.String.pipe(Schema.maxLength(1000))),
  /** For session/always grants: stop applying after this many seconds. */
  expiresInSeconds: Schema.optional(Schema.Int.pipe(Schema.positive())),
  /** For session/always grants: allow at most this many calls. */
  maxUses: Schema.optional(Schema.Int.pipe(Schema.positive()))
})
const decodeId = Ids.parse

const encoder = new TextEncoder()
const sseFrame = (event: TapeEvent.TapeEvent) =>
  encoder.encode(`id: ${event.tapeSeq}\nevent: ${event._tag}\ndata: ${JSON.stringify(event)}\n\n`)

/**
 * The HTTP routes. Requires `Gateway`: every handler authenticates the caller and makes one Gateway
 * call; ownership is the Gateway's business.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const router = (options: Options) => {
  const authenticator = Auth.makeAuthenticator(options.tokens)
  const maxBody = options.maxBodyBytes ?? 1024 * 1024
  const heartbeat = options.heartbeatSeconds ?? 15

  const authenticate = Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
    const result = authenticator(request.headers.authorization)
    return "caller" in result
      ? Effect.succeed(result.caller)
      : Effect.fail(new Errors.Unauthenticated({ message: result.refused }))
  })

  const body = <A, I>(schema: Schema.Schema<A, I>) =>
    Effect.gen(function* () {
      // Refuse a declared oversize body before reading a byte of it.
      const request = yield* HttpServerRequest.HttpServerRequest
      const declared = Number(request.headers["content-length"] ?? 0)
      if (declared > maxBody) {
        return yield* new Errors.PayloadTooLarge({ what: "request body", size: declared, limit: maxBody })
      }
    }).pipe(
      Effect.zipRight(HttpServerRequest.schemaBodyJson(schema)),
      HttpIncomingMessage.withMaxBodySize(Option.some(maxBody)),
      Effect.catchAll((error) => {
        if (Errors.isPalyraError(error)) return Effect.fail(error)
        if (ParseResult.isParseError(error)) {
          return Effect.fail(new Errors.InvalidArgument({ message: ParseResult.TreeFormatter.formatErrorSync(error) }))
        }
        const text = String((error as { cause?: unknown }).cause ?? error)
        return Effect.fail(
          /too large|maxBodySize|exceed/i.test(text)
            ? new Errors.PayloadTooLarge({ what: "request body", size: maxBody + 1, limit: maxBody })
            : new Errors.InvalidArgument({ message: "request body must be JSON" })
        )
      })
    )

  const param = (name: string) => Effect.map(HttpRouter.params, (p) => p[name])

  /** Run a handler for an authenticated caller, mapping every failure to `{ code, message }`. */
  const handle = <E, R>(
    f: (caller: Caller, gateway: Gateway.Service) => Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>
  ) =>
    Effect.gen(function* () {
      const caller = yield* authenticate
      const gateway = yield* Gateway.Gateway
      return yield* f(caller, gateway)
    }).pipe(
      Effect.catchAllCause((cause) => {
        if (Cause.isInterruptedOnly(cause)) return Effect.failCause(cause)
        const failure = Cause.failureOption(cause)
        const e = Errors.toWire(Option.getOrUndefined(failure))
        const response = Effect.succeed(errorResponse(e.http, e.code, e.message))
        return e.expose ? response : Effect.zipRight(Effect.logError("request failed", cause), response)
      })
    )

  const json = (value: unknown, status = 200) => Effect.succeed(HttpServerResponse.unsafeJson(value, { status }))

  const sse = (events: Stream.Stream<TapeEvent.TapeEvent, unknown>) => {
    const keepAlive = Stream.fromSchedule(Schedule.spaced(`${heartbeat} seconds`)).pipe(
      Stream.map(() => encoder.encode(": keep-alive\n\n"))
    )
    const frames = Stream.concat(Stream.make(encoder.encode(": connected\n\n")), Stream.map(events, sseFrame))
    const body = Stream.merge(frames, keepAlive, { haltStrategy: "left" })
    return HttpServerResponse.stream(options.shutdown ? Stream.interruptWhen(body, options.shutdown) : body, {
      contentType: "text/event-stream",
      headers: { "cache-control": "no-cache", "x-accel-buffering": "no", connection: "keep-alive" }
    })
  }

  const afterSeqFrom = Effect.gen(function* () {
    const request = yield* HttpServerRequest.HttpServerRequest
    const url = new URL(request.url, "http://localhost")
    const raw = request.headers["last-event-id"] ?? url.searchParams.get("after") ?? "0"
    const n = Number(raw)
    if (!Number.isInteger(n) || n < 0) {
      return yield* new Errors.InvalidArgument({ message: "Last-Event-ID / after must be a non-negative integer" })
    }
    return n
  })

  const query = Effect.map(HttpServerRequest.HttpServerRequest, (r) => new URL(r.url, "http://localhost").searchParams)

  return HttpRouter.empty.pipe(
    HttpRouter.get("/healthz", Effect.succeed(HttpServerResponse.unsafeJson({ status: "ok" }))),
    HttpRouter.get(
      "/readyz",
      Effect.map(options.ready ?? Effect.succeed(true), (ok) =>
        HttpServerResponse.unsafeJson({ status: ok ? "ready" : "starting" }, { status: ok ? 200 : 503 })
      )
    ),
    HttpRouter.get(
      "/openapi.json",
      handle(() => json(openApiDocument))
    ),

    // ---- runs ------------------------------------------------------------------------------
    HttpRouter.post(
      "/v1/runs",
      handle((caller, gateway) =>
        Effect.gen(function* () {
          const b = yield* body(MessageBody)
          const request = {
            text: b.text,
            sessionId: b.sessionId === undefined ? undefined : yield* decodeId(Ids.SessionId, b.sessionId, "sessionId"),
            key: b.sessionKey,
            channel: b.channel
          }
          if ((yield* query).get("stream") === "true") {
            const started = yield* gateway.startRun(caller, request)
            return sse(started.events)
          }
          const { session, run } = yield* gateway.sendMessage(caller, request)
          return yield* json({ runId: run.id, sessionId: session.id, state: run.state }, 202)
        })
      )
    ),
    HttpRouter.get(
      "/v1/runs/:id",
      handle((caller, gateway) =>
        Effect.gen(function* () {
          const id = yield* decodeId(Ids.RunId, yield* param("id"), "runId")
          return yield* json(yield* gateway.getRun(caller, id))
        })
      )
    ),
    HttpRouter.post(
      "/v1/runs/:id/cancel",
      handle((caller, gateway) =>
        Effect.gen(function* () {
          const id = yield* decodeId(Ids.RunId, yield* param("id"), "runId")
          return yield* json(yield* gateway.cancelRun(caller, id))
        })
      )
    ),

    // ---- sessions --------------------------------------------------------------------------
    HttpRouter.get(
      "/v1/sessions",
      handle((caller, gateway) =>
        Effect.gen(function* () {
          const q = yield* query
          const limit = Number(q.get("limit") ?? 100)
          return yield* json(
            yield* gateway.listSessions(caller, {
              includeArchived: q.get("archived") === "true",
              limit: Number.isFinite(limit) ? Math.min(Math.max(1, limit), 1000) : 100
            })
          )
        })
      )
    ),
    HttpRouter.post(
      "/v1/sessions",
      handle((caller, gateway) =>
        Effect.gen(function* () {
          const b = yield* body(SessionBody)
          return yield* json(
            yield* gateway.resolveSession(caller, { key: b.sessionKey, title: b.title, channel: b.channel }),
            201
          )
        })
      )
    ),
    HttpRouter.get(
      "/v1/sessions/:id",
      handle((caller, gateway) =>
        Effect.gen(function* () {
          const id = yield* decodeId(Ids.SessionId, yield* param("id"), "sessionId")
          return yield* json(yield* gateway.getSession(caller, id))
        })
      )
    ),
    HttpRouter.post(
      "/v1/sessions/:id/reset",
      handle((caller, gateway) =>
        Effect.gen(function* () {
          const id = yield* decodeId(Ids.SessionId, yield* param("id"), "sessionId")
          return yield* json(yield* gateway.resetSession(caller, id))
        })
      )
    ),
    HttpRouter.post(
      "/v1/sessions/:id/branch",
      handle((caller, gateway) =>
        Effect.gen(function* () {
          const id = yield* decodeId(Ids.SessionId, yield* param("id"), "sessionId")
          const b = yield* body(BranchBody)
          return yield* json(yield* gateway.branchSession(caller, id, { atSeq: b.atSeq, title: b.title }), 201)
        })
      )
    ),
    HttpRouter.get(
      "/v1/sessions/:id/tape",
      handle((caller, gateway) =>
        Effect.gen(function* () {
          const id = yield* decodeId(Ids.SessionId, yield* param("id"), "sessionId")
          const q = yield* query
          const afterSeq = Math.max(0, Number(q.get("after") ?? 0) || 0)
          const limit = Math.min(Math.max(1, Number(q.get("limit") ?? 500) || 500), 5000)
          return yield* json(yield* gateway.readTape(caller, id, { afterSeq, limit }))
        })
      )
    ),
    HttpRouter.get(
      "/v1/sessions/:id/events",
      handle((caller, gateway) =>
        Effect.gen(function* () {
          const id = yield* decodeId(Ids.SessionId, yield* param("id"), "sessionId")
          // Fail before the response starts when the session is not the caller's.
          yield* gateway.getSession(caller, id)
          const afterSeq = yield* afterSeqFrom
          return sse(gateway.subscribe(caller, id, afterSeq, { approver: true }))
        })
      )
    ),

    // ---- approvals -------------------------------------------------------------------------
    HttpRouter.get(
      "/v1/approvals",
      handle((caller, gateway) =>
        Effect.gen(function* () {
          const q = yield* query
          const status = q.get("status")
          if (status !== null && !["pending", "approved", "denied", "expired", "revoked"].includes(status)) {
            return yield* new Errors.InvalidArgument({
              message: "status must be pending, approved, denied, expired or revoked"
            })
          }
          const sessionId = q.get("sessionId")
          const runId = q.get("runId")
          return yield* json(
            yield* gateway.listApprovals(caller, {
              status: (status ?? undefined) as Records.ApprovalStatus | undefined,
              sessionId: sessionId === null ? undefined : yield* decodeId(Ids.SessionId, sessionId, "sessionId"),
              runId: runId === null ? undefined : yield* decodeId(Ids.RunId, runId, "runId")
            })
          )
        })
      )
    ),
    HttpRouter.get(
      "/v1/approvals/:id",
      handle((caller, gateway) =>
        Effect.gen(function* () {
          const id = yield* decodeId(Ids.ApprovalId, yield* param("id"), "approvalId")
          return yield* json(yield* gateway.getApproval(caller, id))
        })
      )
    ),
    HttpRouter.post(
      "/v1/approvals/:id",
      handle((caller, gateway) =>
        Effect.gen(function* () {
          const id = yield* decodeId(Ids.ApprovalId, yield* param("id"), "approvalId")
          const b = yield* body(ApprovalBody)
          const now = yield* Clock.currentTimeMillis
          return yield* json(
            yield* gateway.resolveApproval(caller, {
              approvalId: id,
              decision: b.decision,
              scope: b.scope,
              reason: b.reason,
              grantExpiresAt: b.expiresInSeconds === undefined ? undefined : now + b.expiresInSeconds * 1000,
              grantMaxUses: b.maxUses
            })
          )
        })
      )
    ),

    // ---- standing grants --------------------------------------------------------------------
    HttpRouter.get(
      "/v1/grants",
      handle((caller, gateway) => Effect.flatMap(gateway.listGrants(caller), (grants) => json(grants)))
    ),
    HttpRouter.post(
      "/v1/grants/:id/revoke",
      handle((caller, gateway) =>
        Effect.gen(function* () {
          const id = yield* decodeId(Ids.ApprovalId, yield* param("id"), "grantId")
          return yield* json(yield* gateway.revokeGrant(caller, id))
        })
      )
    ),

    // ---- journal ---------------------------------------------------------------------------
    HttpRouter.get(
      "/v1/journal/verify",
      handle((caller, gateway) => Effect.flatMap(gateway.verifyJournal(caller), (result) => json(result)))
    ),
    HttpRouter.catchAll(() => Effect.succeed(errorResponse(404, "not_found", "no such route")))
  )
}

/** @since 0.1.0 @category Models */
export interface ServeOptions extends Options {
  /** Default 127.0.0.1: pass `0.0.0.0` deliberately to listen on every interface. */
  readonly host?: string | undefined
  /** 0 picks a free port. */
  readonly port: number
}

/**
 * Serve the routes on a Node HTTP server until the scope closes; returns the bound URL.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const serve = (options: ServeOptions) =>
  Effect.gen(function* () {
    const host = options.host ?? "127.0.0.1"
    const node = createServer()
    const server = yield* NodeHttpServer.make(() => node, { host, port: options.port })
    // Shutdown (finalizers run in reverse, so this runs before the server's own close): end open
    // event streams cleanly, give responses a moment to flush, then drop whatever is still open so
    // closing never waits on a long-lived client.
    const closing = yield* Deferred.make<void>()
    yield* Effect.addFinalizer(() =>
      Deferred.succeed(closing, undefined).pipe(
        Effect.zipRight(Effect.sleep("100 millis")),
        Effect.zipRight(Effect.sync(() => node.closeAllConnections()))
      )
    )
    const app = router({ ...options, shutdown: Deferred.await(closing) })
    yield* server.serve(app)
    const address = server.address
    const port = address._tag === "TcpAddress" ? address.port : options.port
    const shownHost = host.includes(":") ? `[${host}]` : host
    return { url: `http://${shownHost}:${port}`, port }
  })
