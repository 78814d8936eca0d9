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
import { Auth, Errors, Gateway, Ids, Journal, type Records, type TapeEvent } from "@palyra/core"
import { CedarPolicy } from "@palyra/core/cedar"
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

/** HTTP status for each stable error code. @since 0.1.0 @category Errors */
export const statusOf = (code: string): number =>
  ({
    invalid_argument: 400,
    unauthenticated: 401,
    permission_denied: 403,
    policy_denied: 403,
    not_found: 404,
    conflict: 409,
    invalid_transition: 409,
    payload_too_large: 413,
    budget_exceeded: 429,
    provider_error: 502,
    unavailable: 503
  })[code] ?? 500

const errorResponse = (status: number, code: string, message: string) =>
  HttpServerResponse.unsafeJson({ code, message }, { status })

type Caller = Auth.Caller

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
const decodeId = <A>(schema: Schema.Schema<A, string>, value: string | undefined, field: string) =>
  Schema.decodeUnknown(schema)(value).pipe(
    Effect.mapError(() => new Errors.InvalidArgument({ message: `${field} must be a 26-character ULID`, field }))
  )

const encoder = new TextEncoder()
const sseFrame = (event: TapeEvent.TapeEvent) =>
  encoder.encode(`id: ${event.tapeSeq}\nevent: ${event._tag}\ndata: ${JSON.stringify(event)}\n\n`)

/**
 * The HTTP routes. Requires `Gateway` and `Journal` (for verify).
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
        const failure = Cause.failureOption(cause)
        if (Option.isSome(failure) && Errors.isPalyraError(failure.value)) {
          const e = failure.value
          return Effect.succeed(errorResponse(statusOf(e.code), e.code, e.message))
        }
        if (Cause.isInterruptedOnly(cause)) return Effect.failCause(cause)
        return Effect.logError("request failed", cause).pipe(
          Effect.as(errorResponse(500, "internal", "internal error"))
        )
      })
    )

  const json = (value: unknown, status = 200) => Effect.succeed(HttpServerResponse.unsafeJson(value, { status }))

  // Sessions belong to their principal; operators may see every session.
  const principalFor = (caller: Caller) => (caller.operator ? undefined : caller.principal)

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

  const ownedRun = (gateway: Gateway.Service, caller: Caller, id: string | undefined) =>
    Effect.gen(function* () {
      const runId = yield* decodeId(Ids.RunId, id, "runId")
      const run = yield* gateway.getRun(runId)
      if (!caller.operator && run.principal !== caller.principal) {
        return yield* new Errors.NotFound({ entity: "run", id: runId })
      }
      return run
    })

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
          const sessionId =
            b.sessionId === undefined ? undefined : yield* decodeId(Ids.SessionId, b.sessionId, "sessionId")
          const q = yield* query
          const request = {
            principal: caller.principal,
            text: b.text,
            sessionId,
            key: b.sessionKey,
            channel: b.channel
          }
          if (q.get("stream") === "true") {
            const started = yield* gateway.startRun(request)
            return sse(started.events)
          }
          const { session, run } = yield* gateway.sendMessage(request)
          return yield* json({ runId: run.id, sessionId: session.id, state: run.state }, 202)
        })
      )
    ),
    HttpRouter.get(
      "/v1/runs/:id",
      handle((caller, gateway) =>
        Effect.flatMap(param("id"), (id) => Effect.flatMap(ownedRun(gateway, caller, id), (r) => json(r)))
      )
    ),
    HttpRouter.post(
      "/v1/runs/:id/cancel",
      handle((caller, gateway) =>
        Effect.gen(function* () {
          const run = yield* ownedRun(gateway, caller, yield* param("id"))
          return yield* json(yield* gateway.cancelRun(run.id, caller.principal))
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
            yield* gateway.listSessions({
              principal: principalFor(caller),
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
            yield* gateway.resolveSession({
              principal: caller.principal,
              key: b.sessionKey,
              title: b.title,
              channel: b.channel
            }),
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
          return yield* json(yield* gateway.getSession(id, principalFor(caller)))
        })
      )
    ),
    HttpRouter.post(
      "/v1/sessions/:id/reset",
      handle((caller, gateway) =>
        Effect.gen(function* () {
          const id = yield* decodeId(Ids.SessionId, yield* param("id"), "sessionId")
          return yield* json(yield* gateway.resetSession(id, principalFor(caller)))
        })
      )
    ),
    HttpRouter.post(
      "/v1/sessions/:id/branch",
      handle((caller, gateway) =>
        Effect.gen(function* () {
          const id = yield* decodeId(Ids.SessionId, yield* param("id"), "sessionId")
          const b = yield* body(BranchBody)
          return yield* json(
            yield* gateway.branchSession(id, {
              principal: principalFor(caller),
              atSeq: b.atSeq,
              ...(b.title ? { title: b.title } : {})
            }),
            201
          )
        })
      )
    ),
    HttpRouter.get(
      "/v1/sessions/:id/tape",
      handle((caller, gateway) =>
        Effect.gen(function* () {
          const id = yield* decodeId(Ids.SessionId, yield* param("id"), "sessionId")
          yield* gateway.getSession(id, principalFor(caller))
          const q = yield* query
          const afterSeq = Math.max(0, Number(q.get("after") ?? 0) || 0)
          const limit = Math.min(Math.max(1, Number(q.get("limit") ?? 500) || 500), 5000)
          return yield* json(yield* gateway.readTape(id, { afterSeq, limit }))
        })
      )
    ),
    HttpRouter.get(
      "/v1/sessions/:id/events",
      handle((caller, gateway) =>
        Effect.gen(function* () {
          const id = yield* decodeId(Ids.SessionId, yield* param("id"), "sessionId")
          yield* gateway.getSession(id, principalFor(caller))
          const afterSeq = yield* afterSeqFrom
          return sse(gateway.subscribe(id, afterSeq, { approver: true }))
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
          const list = yield* gateway.listApprovals({
            status: (status ?? undefined) as Records.ApprovalStatus | undefined,
            sessionId: sessionId === null ? undefined : yield* decodeId(Ids.SessionId, sessionId, "sessionId"),
            runId: runId === null ? undefined : yield* decodeId(Ids.RunId, runId, "runId")
          })
          return yield* json(caller.operator ? list : list.filter((a) => a.principal === caller.principal))
        })
      )
    ),
    HttpRouter.get(
      "/v1/approvals/:id",
      handle((caller, gateway) =>
        Effect.gen(function* () {
          const id = yield* decodeId(Ids.ApprovalId, yield* param("id"), "approvalId")
          const approval = yield* gateway.getApproval(id)
          if (!caller.operator && approval.principal !== caller.principal) {
            return yield* new Errors.NotFound({ entity: "approval", id })
          }
          return yield* json(approval)
        })
      )
    ),
    HttpRouter.post(
      "/v1/approvals/:id",
      handle((caller, gateway) =>
        Effect.gen(function* () {
          const id = yield* decodeId(Ids.ApprovalId, yield* param("id"), "approvalId")
          const b = yield* body(ApprovalBody)
          const approval = yield* gateway.getApproval(id)
          if (!caller.operator && approval.principal !== caller.principal) {
            return yield* new Errors.NotFound({ entity: "approval", id })
          }
          const now = yield* Clock.currentTimeMillis
          return yield* json(
            yield* gateway.resolveApproval({
              approvalId: id,
              decision: b.decision,
              scope: b.scope,
              by: caller.principal,
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
      handle((caller, gateway) =>
        Effect.gen(function* () {
          const grants = yield* gateway.listGrants({ principal: principalFor(caller) })
          return yield* json(grants.map((g) => ({ ...g, cedar: CedarPolicy.grantPolicy(g) })))
        })
      )
    ),
    HttpRouter.post(
      "/v1/grants/:id/revoke",
      handle((caller, gateway) =>
        Effect.gen(function* () {
          const id = yield* decodeId(Ids.ApprovalId, yield* param("id"), "grantId")
          const grant = yield* gateway.getApproval(id)
          if (!caller.operator && grant.principal !== caller.principal) {
            return yield* new Errors.NotFound({ entity: "grant", id })
          }
          return yield* json(yield* gateway.revokeGrant(id, caller.principal))
        })
      )
    ),

    // ---- journal ---------------------------------------------------------------------------
    HttpRouter.get(
      "/v1/journal/verify",
      handle((caller) =>
        Effect.gen(function* () {
          if (!caller.operator) return yield* new Errors.PermissionDenied({ message: "verify needs an operator token" })
          const journal = yield* Journal.Journal
          return yield* json(yield* journal.verify)
        })
      )
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
