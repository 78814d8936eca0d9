/**
 * The gRPC transport: the Gateway over gRPC, gRPC-Web and the Connect protocol on one HTTP/2 port
 * (protobuf-es v2 + connect-es v2). `palyra.v1.GatewayService.RunStream` is bidirectional: start or
 * resume a session's stream, send messages, approval decisions and cancels; receive every tape event
 * in tape_seq order. Bearer-token auth on every service but `grpc.health.v1.Health`; typed core errors
 * map to gRPC codes; messages are size-limited.
 *
 * Thin by design: every handler runs one Gateway call on the caller's runtime with the request's
 * abort signal, inside a server span that continues the client's trace (W3C `traceparent`, or b3).
 *
 * @since 0.1.0
 */

import type { Http2ServerRequest, Http2ServerResponse } from "node:http2"
import { create } from "@bufbuild/protobuf"
import {
  Code,
  ConnectError,
  type ConnectRouter,
  createClient,
  createContextKey,
  type HandlerContext,
  type Interceptor
} from "@connectrpc/connect"
import { connectNodeAdapter, createGrpcTransport } from "@connectrpc/connect-node"
import * as HttpHeaders from "@effect/platform/Headers"
import * as HttpTraceContext from "@effect/platform/HttpTraceContext"
import { Auth, type Caller as CallerT, Errors, Follower, Gateway, Ids, Metrics, TapeEvent } from "@palyra/core"
import { Cause, Effect, Exit, Layer, Metric, Option, Runtime, type Schema, Scope, type Tracer } from "effect"
import { Health, HealthCheckResponse_ServingStatus, HealthCheckResponseSchema } from "./gen/grpc/health/v1/health_pb.js"
import * as pb from "./gen/palyra/v1/gateway_pb.js"
import { backgroundRoutes } from "./internal/background.js"
import { WideWindowSessionManager } from "./internal/clientSession.js"
import { compactionHandlers } from "./internal/compaction.js"
import {
  attachmentsFromPb,
  scopeFromPb,
  statusFromPb,
  toPbAgent,
  toPbApproval,
  toPbEvent,
  toPbRun,
  toPbSession
} from "./internal/convert.js"
import { listen } from "./internal/listen.js"
import { pairingRoutes } from "./internal/pairing.js"

/** Node's own `setImmediate`, taken at load: a test's fake timers replace the global one. */
const nodeImmediate = globalThis.setImmediate

import * as RunStreamWire from "./internal/runStreamWire.js"

/** @since 0.1.0 @category Models */
export type TokenGrant = Auth.TokenGrant

/** @since 0.1.0 @category Models */
export interface Options {
  readonly tokens: ReadonlyArray<TokenGrant>
  /** Largest message accepted, in bytes (default 1 MiB). */
  readonly maxMessageBytes?: number | undefined
}

type Caller = CallerT.Caller
const callerKey = createContextKey<Caller | undefined>(undefined, { description: "palyra caller" })

/** The bearer-token interceptor (constant-time compare; the health service is open). @since 0.1.0 @category Auth */
export const authInterceptor = (tokens: ReadonlyArray<TokenGrant>): Interceptor => {
  const authenticate = Auth.makeAuthenticator(tokens)
  return (next) => async (req) => {
    if (req.service.typeName === Health.typeName) return next(req)
    const result = authenticate(req.header.get("authorization"))
    if ("refused" in result) throw new ConnectError(result.refused, Code.Unauthenticated)
    req.contextValues.set(callerKey, result.caller)
    return next(req)
  }
}

/** A core failure on the gRPC wire, through core's one error table (internal text never leaves). */
const toConnectError = (cause: Cause.Cause<unknown>): ConnectError => {
  if (Cause.isInterruptedOnly(cause)) return new ConnectError("cancelled", Code.Canceled)
  const e = Errors.toWire(Option.getOrUndefined(Cause.failureOption(cause)))
  return new ConnectError(e.message, e.grpc as number as Code)
}

const decode =
  <A>(schema: Schema.Schema<A, string>, field: string) =>
  (value: string) =>
    Ids.parse(schema, value, field)
const sessionIdOf = decode(Ids.SessionId, "session_id")
const runIdOf = decode(Ids.RunId, "run_id")
const approvalIdOf = decode(Ids.ApprovalId, "approval_id")
const optional = <A>(f: (v: string) => Effect.Effect<A, Errors.InvalidArgument>, value: string) =>
  value === "" ? Effect.succeed(undefined) : f(value)

// W3C ids: lowercase hex, not all zeros (the b3 reader checks nothing, so ids are checked here).
/** A wire `SessionTarget` as the Gateway takes it (empty strings mean "not given"). */
const targetOf = (target: pb.SessionTarget | undefined) =>
  Effect.map(optional(sessionIdOf, target?.sessionId ?? ""), (sessionId) => ({
    sessionId,
    key: target?.sessionKey || undefined,
    channel: target?.channel || undefined,
    agent: target?.agent || undefined
  }))

const traceIdPattern = /^(?!0{32}$)[0-9a-f]{32}$/
const spanIdPattern = /^(?!0{16}$)[0-9a-f]{16}$/

/**
 * The client's span from a request's trace headers; none when absent or malformed (a malformed
 * header starts a new trace, as the W3C spec asks).
 *
 * @since 0.1.0
 * @category Tracing
 */
export const clientSpan = (headers: Headers): Option.Option<Tracer.ExternalSpan> =>
  // Most calls carry no trace headers: answered without copying the headers into a record (the
  // copy was ~3% of a streamed run's CPU, once per Gateway call). These are the headers
  // `HttpTraceContext.fromHeaders` reads (W3C, b3 single, b3 multi), case-insensitively.
  !headers.has("traceparent") && !headers.has("b3") && !headers.has("x-b3-traceid")
    ? Option.none()
    : Option.filter(
        HttpTraceContext.fromHeaders(HttpHeaders.fromInput(headers)),
        (span) => traceIdPattern.test(span.traceId) && spanIdPattern.test(span.spanId)
      )

/**
 * Run a handler's effect in a server span named after the method (`palyra.v1.GatewayService/RouteMessage`),
 * whose parent is the client's span when the request carries trace headers (`traceparent`, or
 * `b3` / `x-b3-*`, parsed by `@effect/platform`'s `HttpTraceContext`, the same reader as the HTTP API's).
 * Everything the call does, a run it admits included, joins the client's trace.
 *
 * @since 0.1.0
 * @category Tracing
 */
export const withServerSpan =
  (ctx: Pick<HandlerContext, "service" | "method" | "requestHeader">) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.withSpan(effect, `${ctx.service.typeName}/${ctx.method.name}`, {
      kind: "server",
      parent: Option.getOrUndefined(clientSpan(ctx.requestHeader)),
      attributes: { "rpc.system": "grpc", "rpc.service": ctx.service.typeName, "rpc.method": ctx.method.name },
      captureStackTrace: false
    })

/**
 * One Gateway call as the request's authenticated caller, on the runtime, with the request's abort
 * signal, inside a server span; typed errors become `ConnectError`s. Every handler goes through it.
 */
const callGateway = async <A>(
  runtime: Runtime.Runtime<Gateway.Gateway>,
  ctx: HandlerContext,
  f: (gateway: Gateway.Service, caller: Caller) => Effect.Effect<A, unknown, Gateway.Gateway>
): Promise<A> => {
  const caller = ctx.values.get(callerKey)
  if (!caller) throw new ConnectError("unauthenticated", Code.Unauthenticated)
  const exit = await Runtime.runPromiseExit(runtime)(
    Effect.flatMap(Gateway.Gateway, (g) => f(g, caller)).pipe(withServerSpan(ctx)),
    { signal: ctx.signal }
  )
  if (Exit.isSuccess(exit)) return exit.value
  throw toConnectError(exit.cause)
}

/**
 * The Connect routes over a runtime that provides the `Gateway`.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const routes = (runtime: Runtime.Runtime<Gateway.Gateway>) => {
  const run = <A>(
    ctx: HandlerContext,
    f: (gateway: Gateway.Service, caller: Caller) => Effect.Effect<A, unknown, Gateway.Gateway>
  ) => callGateway(runtime, ctx, f)

  return (router: ConnectRouter) => {
    router.service(Health, {
      check: () => create(HealthCheckResponseSchema, { status: HealthCheckResponse_ServingStatus.SERVING }),
      async *watch() {
        yield create(HealthCheckResponseSchema, { status: HealthCheckResponse_ServingStatus.SERVING })
      }
    })

    router.service(pb.GatewayService, {
      routeMessage: (req, ctx) =>
        run(ctx, (g, caller) =>
          Effect.gen(function* () {
            const { session, run } = yield* g.sendMessage(caller, {
              text: req.text,
              ...(yield* targetOf(req.target)),
              ...attachmentsFromPb(req.attachments)
            })
            return create(pb.RouteMessageResponseSchema, { runId: run.id, sessionId: session.id })
          })
        ),
      getRun: (req, ctx) =>
        run(ctx, (g, caller) =>
          Effect.gen(function* () {
            const r = yield* g.getRun(caller, yield* runIdOf(req.runId))
            return create(pb.GetRunResponseSchema, { run: toPbRun(r) })
          })
        ),
      runStream: (requests, ctx) => runStream(runtime, requests, ctx, run)
    })

    router.service(pb.ApprovalsService, {
      listApprovals: (req, ctx) =>
        run(ctx, (g, caller) =>
          Effect.gen(function* () {
            const list = yield* g.listApprovals(caller, {
              sessionId: yield* optional(sessionIdOf, req.sessionId),
              runId: yield* optional(runIdOf, req.runId),
              status: statusFromPb(req.status)
            })
            return create(pb.ListApprovalsResponseSchema, { approvals: list.map(toPbApproval) })
          })
        ),
      getApproval: (req, ctx) =>
        run(ctx, (g, caller) =>
          Effect.gen(function* () {
            const a = yield* g.getApproval(caller, yield* approvalIdOf(req.approvalId))
            return create(pb.GetApprovalResponseSchema, { approval: toPbApproval(a) })
          })
        ),
      resolveApproval: (req, ctx) =>
        run(ctx, (g, caller) =>
          Effect.gen(function* () {
            const d = req.decision
            if (!d) return yield* new Errors.InvalidArgument({ message: "decision is required", field: "decision" })
            const a = yield* resolve(g, caller, d)
            return create(pb.ResolveApprovalResponseSchema, { approval: toPbApproval(a) })
          })
        )
    })

    router.service(pb.SessionsService, {
      resolveSession: (req, ctx) =>
        run(ctx, (g, caller) =>
          Effect.gen(function* () {
            const s = yield* g.resolveSession(caller, {
              ...(yield* targetOf(req.target)),
              title: req.title || undefined
            })
            return create(pb.ResolveSessionResponseSchema, { session: toPbSession(s) })
          })
        ),
      getSession: (req, ctx) =>
        run(ctx, (g, caller) =>
          Effect.map(
            Effect.flatMap(sessionIdOf(req.sessionId), (id) => g.getSession(caller, id)),
            (s) => create(pb.GetSessionResponseSchema, { session: toPbSession(s) })
          )
        ),
      listSessions: (req, ctx) =>
        run(ctx, (g, caller) =>
          Effect.map(
            g.listSessions(caller, {
              includeArchived: req.includeArchived,
              limit: req.limit === 0 ? 100 : Math.min(req.limit, 1000)
            }),
            (list) => create(pb.ListSessionsResponseSchema, { sessions: list.map(toPbSession) })
          )
        ),
      resetSession: (req, ctx) =>
        run(ctx, (g, caller) =>
          Effect.map(
            Effect.flatMap(sessionIdOf(req.sessionId), (id) => g.resetSession(caller, id)),
            (s) => create(pb.ResetSessionResponseSchema, { session: toPbSession(s) })
          )
        ),
      branchSession: (req, ctx) =>
        run(ctx, (g, caller) =>
          Effect.gen(function* () {
            const id = yield* sessionIdOf(req.sessionId)
            const s = yield* g.branchSession(caller, id, {
              atSeq: req.atSeq === 0n ? undefined : Number(req.atSeq),
              ...(req.title ? { title: req.title } : {})
            })
            return create(pb.BranchSessionResponseSchema, { session: toPbSession(s) })
          })
        ),
      compactSession: (req, ctx) => run(ctx, (g, caller) => compactionHandlers.compactSession(g, caller, req)),
      listCheckpoints: (req, ctx) => run(ctx, (g, caller) => compactionHandlers.listCheckpoints(g, caller, req)),
      restoreCheckpoint: (req, ctx) => run(ctx, (g, caller) => compactionHandlers.restoreCheckpoint(g, caller, req))
    })

    router.service(pb.AgentsService, {
      listAgents: (_req, ctx) =>
        run(ctx, (g, caller) =>
          Effect.map(g.listAgents(caller), (agents) =>
            create(pb.ListAgentsResponseSchema, { agents: agents.map(toPbAgent) })
          )
        )
    })

    backgroundRoutes(router, run)
    pairingRoutes(router, run)
    router.service(pb.JournalService, {
      readTape: (req, ctx) =>
        run(ctx, (g, caller) =>
          Effect.gen(function* () {
            const id = yield* sessionIdOf(req.sessionId)
            const limit = req.limit === 0 ? 500 : Math.min(req.limit, 5000)
            const events = yield* g.readTape(caller, id, { afterSeq: Number(req.afterSeq), limit })
            return create(pb.ReadTapeResponseSchema, {
              events: events.map(toPbEvent),
              nextAfterSeq: BigInt(events.length === limit ? events[events.length - 1]!.tapeSeq : 0)
            })
          })
        ),
      verify: (_req, ctx) =>
        run(ctx, (g, caller) =>
          Effect.gen(function* () {
            const r = yield* g.verifyJournal(caller)
            return create(
              pb.VerifyResponseSchema,
              r.ok
                ? { ok: true, checked: BigInt(r.checked) }
                : {
                    ok: false,
                    checked: BigInt(r.checked),
                    reason: r.reason,
                    detail: r.detail,
                    sessionId: r.sessionId,
                    tapeSeq: BigInt(r.tapeSeq)
                  }
            )
          })
        )
    })
  }
}

const resolve = (g: Gateway.Service, caller: Caller, d: pb.ApprovalDecision) =>
  Effect.gen(function* () {
    const id = yield* approvalIdOf(d.approvalId)
    return yield* g.resolveApproval(caller, {
      approvalId: id,
      decision: d.approve ? "approve" : "deny",
      scope: scopeFromPb(d.scope),
      reason: d.reason || undefined
    })
  })

/** A Gateway call on the request's runtime, context and span. */
type Call = <A>(f: (g: Gateway.Service, c: Caller) => Effect.Effect<A, unknown, Gateway.Gateway>) => Promise<A>

/** RunStream over connect-es (gRPC-Web, Connect, JSON): the shared logic, one message per event. */
async function* runStream(
  runtime: Runtime.Runtime<Gateway.Gateway>,
  requests: AsyncIterable<pb.RunStreamRequest>,
  ctx: HandlerContext,
  run: <A>(
    ctx: HandlerContext,
    f: (g: Gateway.Service, c: Caller) => Effect.Effect<A, unknown, Gateway.Gateway>
  ) => Promise<A>
): AsyncGenerator<pb.RunStreamResponse> {
  for await (const item of runStreamItems(runtime, requests, ctx.signal, (f) => run(ctx, f))) {
    if (typeof item === "string")
      yield create(pb.RunStreamResponseSchema, { payload: { case: "sessionId", value: item } })
    else for (const event of item) yield eventResponse(event)
  }
}

/**
 * RunStream: bind to a session (start or resume), then stream its events while handling the
 * client's further requests. Ends when the client cancels, or after the client half-closed once the
 * last run it started has ended. Yields the session's id, then each batch of ready events (the
 * gRPC path writes a batch at once, `internal/runStreamWire.ts`; connect-es gets them one by one).
 */
async function* runStreamItems(
  runtime: Runtime.Runtime<Gateway.Gateway>,
  requests: AsyncIterable<pb.RunStreamRequest>,
  signal: AbortSignal,
  call: Call,
  direct?: RunStreamWire.DirectWrite
): AsyncGenerator<RunStreamWire.Item> {
  const iterator = requests[Symbol.asyncIterator]()
  const first = await iterator.next()
  if (first.done) return
  const action = first.value.action
  let lastRun: string | undefined
  let lastRunEnded = false
  let sessionId: string
  let afterSeq: number
  // The stream's follower, its gauge and approval registration live in `scope` (closed in the
  // `finally` below, or here if the stream ends before it gets there).
  const scope = Effect.runSync(Scope.make())
  const closeScope = () => Runtime.runPromise(runtime)(Scope.close(scope, Exit.void))
  let started: Follower.Follower | undefined
  // With a direct writer, the stream writes from its start commit: the follower is handed over as
  // soon as it is attached (before the commit), and its wake-up inside the start commit's
  // publication writes the session id and the events there and then, instead of after the start
  // call returns (behind every other fiber a burst of starts queued). Nothing is written until an
  // event of this run is published (its start committed: a refused start writes nothing); what
  // could not be written (a backlog) or was taken after the run's end is left for the loop below.
  let starting = true
  let sessionIdSent = false
  let held: ReturnType<Follower.Follower["take"]>
  let startDefect: { readonly error: unknown } | undefined
  // connect-es (gRPC-Web, Connect: no direct writer) writes only what this generator yields: the
  // start's wake-up queues what it takes (bounded: past it, the follower holds the rest within its
  // live bound, as for a refused direct write), and the generator yields it while the start call is
  // still under way (below), so these protocols also send from the start commit.
  const queued: Array<RunStreamWire.Item> | undefined = direct === undefined ? [] : undefined
  let onQueued: (() => void) | undefined
  const startWrite: RunStreamWire.DirectWrite =
    direct ??
    ((item) => {
      if (queued === undefined || queued.length >= MAX_QUEUED_AT_START) return false
      queued.push(item)
      const notify = onQueued
      onQueued = undefined
      notify?.()
      return true
    })
  const attached =
    action.case !== "start"
      ? undefined
      : (follower: Follower.Follower, run: { readonly id: string; readonly sessionId: string }) => {
          // A retried admission (a lost key race) attaches a new follower; the old one saw nothing of ours.
          held = undefined
          lastRun = run.id
          lastRunEnded = false
          let ours = false
          // Runs inside the hub's publication: nothing may escape it (a defect of the read or the
          // write fails this stream once the start call has answered, as the loop's wake-up does).
          const onStartWake = () => {
            if (!starting || held !== undefined || startDefect !== undefined || signal.aborted) return
            try {
              for (;;) {
                const ready = follower.take()
                if (ready === undefined) return follower.onReady(onStartWake)
                if (ready === Follower.Done || Follower.isFailed(ready)) {
                  held = ready
                  return
                }
                ours ||= ready.some((e) => e.runId === run.id)
                if (ours && !sessionIdSent) sessionIdSent = startWrite(run.sessionId)
                if (!sessionIdSent || !startWrite(ready)) {
                  held = ready
                  return
                }
                for (const e of ready) if (e.runId === run.id && TapeEvent.isRunEnd(e)) lastRunEnded = true
              }
            } catch (error) {
              startDefect = { error }
            }
          }
          follower.onReady(onStartWake)
        }
  if (action.case === "start") {
    // The session's follower is attached before the run's start commit (its events delivered by
    // their publication, none read back); this stream is the run's approval channel from its first
    // event (`startRunFollowing` holds it for the run, `registerApprover` for the stream).
    const opening = call((g, caller) =>
      Scope.extend(
        Effect.gen(function* () {
          const s = yield* g.startRunFollowing(
            caller,
            {
              text: action.value.text,
              ...(yield* targetOf(action.value.target)),
              ...attachmentsFromPb(action.value.attachments)
            },
            { session: true, attached }
          )
          yield* g.registerApprover(caller, s.session.id)
          yield* Effect.acquireRelease(Metric.modify(openGrpcStreams, 1), () => Metric.modify(openGrpcStreams, -1))
          return s
        }),
        scope
      )
    )
    if (queued !== undefined) {
      // Yield what the start commit's wake-up queued while the call is under way. A consumer gone
      // meanwhile (the client) leaves the call to settle, then closes the scope.
      let settled = false
      void opening
        .then(
          () => undefined,
          () => undefined
        )
        .finally(() => {
          settled = true
          const notify = onQueued
          onQueued = undefined
          notify?.()
        })
      let handedOnEarly = false
      try {
        while (!settled) {
          const item = queued.shift()
          if (item !== undefined) yield item
          else
            await new Promise<void>((r) => {
              onQueued = r
            })
        }
        handedOnEarly = true
      } finally {
        if (!handedOnEarly) {
          starting = false
          await opening.then(closeScope, closeScope)
        }
      }
    }
    let opened: Awaited<typeof opening>
    try {
      opened = await opening
    } catch (error) {
      starting = false
      // Started from its start commit, then failed: what was queued goes out before the error.
      try {
        for (let item = queued?.shift(); item !== undefined; item = queued?.shift()) yield item
      } finally {
        await closeScope()
      }
      throw error
    }
    starting = false
    if (startDefect !== undefined) {
      await closeScope()
      throw ConnectError.from(startDefect.error)
    }
    started = opened.follower
    sessionId = opened.session.id
    lastRun = opened.run.id
    afterSeq = opened.run.startSeq - 1
  } else if (action.case === "resume") {
    const resumed = action.value
    const session = await call((g, caller) =>
      Effect.flatMap(sessionIdOf(resumed.sessionId), (id) => g.getSession(caller, id))
    )
    sessionId = session.id
    afterSeq = Number(resumed.afterSeq)
  } else {
    throw new ConnectError("the first message of RunStream must be start or resume", Code.InvalidArgument)
  }
  let handedOn = false
  try {
    for (let item = queued?.shift(); item !== undefined; item = queued?.shift()) yield item
    if (!sessionIdSent) yield sessionId
    handedOn = true
  } finally {
    if (!handedOn) await closeScope()
  }

  // Handle the client's further requests while events flow.
  let clientDone = false
  let failure: unknown
  let wakeLoop: () => void = () => {}
  // Runs whose end was sent while a `message` request's startRun was under way.
  let startsInFlight = 0
  const endedWhileStarting = new Set<string>()
  const startMessage = (text: string) =>
    call((g, caller) => g.startRun(caller, { text, sessionId: sessionId as Ids.SessionId }))
  const pump = (async () => {
    try {
      while (true) {
        const next = await iterator.next()
        if (next.done) break
        const a = next.value.action
        if (a.case === "message") {
          startsInFlight++
          let sent: Awaited<ReturnType<typeof startMessage>>
          try {
            sent = await startMessage(a.value)
          } catch (error) {
            startsInFlight--
            throw error
          }
          // Counted down only once the run is `lastRun` (no microtask in between): a run end seen
          // before this point is in `endedWhileStarting`, one seen after it sets `lastRunEnded`.
          startsInFlight--
          lastRun = sent.run.id
          // The run may have ended (and its end been sent) before its start's answer got here.
          lastRunEnded = endedWhileStarting.has(sent.run.id)
          if (startsInFlight === 0) endedWhileStarting.clear()
        } else if (a.case === "approval") {
          const decision = a.value
          await call((g, caller) => resolve(g, caller, decision))
        } else if (a.case === "cancel") {
          const target = a.value.runId
          await call((g, caller) => Effect.flatMap(runIdOf(target), (id) => g.cancelRun(caller, id)))
        } else if (a.case !== undefined) {
          throw new ConnectError(`${a.case} is only allowed as the first message`, Code.InvalidArgument)
        }
      }
      clientDone = true
    } catch (error) {
      failure = error
    }
    wakeLoop()
  })()

  // The session's events come from a follower (plain take/onReady callbacks, no fiber or stream
  // stage per event): the generator yields everything ready at once, then waits for one wake-up.
  // A client that does not read holds up nothing but its own stream (the hub cuts it off when it
  // falls too far behind).
  const follower =
    started ??
    (await call((g, caller) =>
      Scope.extend(
        Effect.zipRight(
          Effect.acquireRelease(Metric.modify(openGrpcStreams, 1), () => Metric.modify(openGrpcStreams, -1)),
          g.follow(caller, sessionId as Ids.SessionId, afterSeq, { approver: true })
        ),
        scope
      )
    ).catch(async (error: unknown) => {
      await closeScope()
      throw error
    }))
  let aborted = false
  const onAbort = () => {
    aborted = true
    wakeLoop()
  }
  signal.addEventListener("abort", onAbort, { once: true })
  const noteRunEnd = (events: ReadonlyArray<TapeEvent.TapeEvent>) => {
    if (startsInFlight > 0) {
      for (const event of events)
        if (event.runId !== null && TapeEvent.isRunEnd(event)) endedWhileStarting.add(event.runId)
    }
    if (lastRun !== undefined && !lastRunEnded)
      for (const event of events) if (event.runId === lastRun && TapeEvent.isRunEnd(event)) lastRunEnded = true
  }
  // The generator parked in `wait` (everything it yielded is written): the wake-up's resolver.
  let parked: (() => void) | undefined
  // What the wake-up took but could not write directly: the generator yields it first.
  let pending: ReturnType<Follower.Follower["take"]> = held
  const resume = () => {
    const r = parked
    parked = undefined
    r?.()
  }
  // The follower's wake-up runs inside the hub's publication (the journal's answer to a commit). With
  // a `direct` writer (the gRPC wire) and the generator parked, it takes the ready events and writes
  // them there and then: the writes of one publication are one pass over its woken streams, instead of
  // each stream's generator resuming through its own microtasks behind everything else the answer
  // resumed. Anything else (a backlog, the end, a failure, a client request or abort) resumes the
  // generator, which handles it exactly as before. A plain callback on purpose: this is the hot path.
  const onWake = () => {
    if (parked === undefined) return
    if (direct !== undefined && failure === undefined && !aborted && !signal.aborted) {
      try {
        for (;;) {
          if (clientDone && (lastRun === undefined || lastRunEnded)) break
          const ready = follower.take()
          if (ready === undefined) return follower.onReady(onWake)
          if (ready === Follower.Done || Follower.isFailed(ready) || !direct(ready)) {
            pending = ready
            break
          }
          noteRunEnd(ready)
        }
      } catch (error) {
        // A defect of the read (`take` rethrows it) or of the write: the generator fails with it.
        failure = error
      }
    }
    resume()
  }
  const wait = () =>
    new Promise<void>((r) => {
      parked = r
      wakeLoop = resume
      follower.onReady(onWake)
    })
  try {
    while (true) {
      if (failure) throw failure instanceof ConnectError ? failure : ConnectError.from(failure)
      // The client finished sending and the last run it started has ended: the stream is complete.
      if (clientDone && (lastRun === undefined || lastRunEnded)) return
      if (aborted || signal.aborted) return
      const ready = pending ?? follower.take()
      pending = undefined
      if (ready === undefined) {
        await wait()
        continue
      }
      if (ready === Follower.Done) return
      if (Follower.isFailed(ready)) throw toConnectError(Cause.fail(ready.failure))
      yield ready
      noteRunEnd(ready)
    }
  } finally {
    signal.removeEventListener("abort", onAbort)
    follower.onReady(undefined)
    // The stream's teardown (its scope's finalizers, then the trailers) waits for the check phase:
    // the frames written in this macrotask (the run's last events, other streams' too) leave first.
    await new Promise((r) => nodeImmediate(r))
    await Runtime.runPromise(runtime)(Scope.close(scope, Exit.void))
    void pump
  }
}

/** How many batches connect-es's start queues before the follower holds the rest. */
const MAX_QUEUED_AT_START = 64

const openGrpcStreams = Metric.tagged(Metrics.openStreams, "transport", "grpc")

// A live event is the same object for every subscriber of its session: build its response once.
const responses = new WeakMap<TapeEvent.TapeEvent, pb.RunStreamResponse>()
const eventResponse = (event: TapeEvent.TapeEvent): pb.RunStreamResponse => {
  let response = responses.get(event)
  if (response === undefined) {
    response = create(pb.RunStreamResponseSchema, { payload: { case: "event", value: toPbEvent(event) } })
    responses.set(event, response)
  }
  return response
}

/** gRPC RunStream's own handler: the same auth, runtime, span and logic as the connect-es route. */
const grpcRunStreamHandler = (runtime: Runtime.Runtime<Gateway.Gateway>, options: Options, shutdown: AbortSignal) => {
  const authenticate = Auth.makeAuthenticator(options.tokens)
  return RunStreamWire.makeHandler({
    readMaxBytes: options.maxMessageBytes ?? 1024 * 1024,
    shutdownSignal: shutdown,
    authenticate: (authorization, ctx) => {
      const result = authenticate(authorization)
      if ("refused" in result) return new ConnectError(result.refused, Code.Unauthenticated)
      ctx.values.set(callerKey, result.caller)
      return undefined
    },
    items: (requests, ctx, direct) =>
      runStreamItems(runtime, requests, ctx.signal, (f) => callGateway(runtime, ctx, f), direct),
    // A batch's envelopes are encoded once and shared by the streams given the same batch
    // (RunStreamWire.batchEncoder's memo): the message itself need not be memoized.
    response: (event) => create(pb.RunStreamResponseSchema, { payload: { case: "event", value: toPbEvent(event) } })
  })
}

/**
 * The transport's request handler for a Node HTTP/2 server: every service over gRPC, gRPC-Web and
 * Connect, on the given runtime; `shutdown` ends open streams. `serve` mounts it on a server of
 * its own; use it directly to mount the services on a server you own.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const handler = (
  runtime: Runtime.Runtime<Gateway.Gateway>,
  options: Options,
  shutdown: AbortSignal
): ((req: Http2ServerRequest, res: Http2ServerResponse) => void) => {
  const connectHandler = connectNodeAdapter({
    routes: routes(runtime),
    interceptors: [authInterceptor(options.tokens)],
    readMaxBytes: options.maxMessageBytes ?? 1024 * 1024,
    shutdownSignal: shutdown
  })
  // gRPC RunStream writes its responses itself (one encode per event, one write per batch);
  // everything else, RunStream over gRPC-Web / Connect included, is connect-es's.
  const runStreamHandler = grpcRunStreamHandler(runtime, options, shutdown)
  return (req, res) => (RunStreamWire.handles(req) ? runStreamHandler(req, res) : connectHandler(req, res))
}

/** @since 0.1.0 @category Models */
export interface ServeOptions extends Options {
  /** Default 127.0.0.1. */
  readonly host?: string | undefined
  /** 0 picks a free port. */
  readonly port: number
}

/**
 * Serve gRPC, gRPC-Web and Connect (HTTP/2 cleartext) until the scope closes.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const serve = (
  options: ServeOptions
): Effect.Effect<
  { readonly url: string; readonly port: number },
  Errors.InvalidArgument,
  Gateway.Gateway | Scope.Scope
> =>
  Effect.gen(function* () {
    const runtime = yield* Effect.runtime<Gateway.Gateway>()
    const shutdown = new AbortController()
    return yield* listen(
      options.host ?? "127.0.0.1",
      options.port,
      handler(runtime, options, shutdown.signal),
      shutdown
    )
  })

/**
 * The transport as a layer (what palyrad mounts): serves until the layer's scope closes.
 *
 * @since 0.1.0
 * @category Layers
 */
export const layer = (options: ServeOptions) => Layer.scopedDiscard(serve(options))

/** @since 0.1.0 @category Client */
export interface ClientOptions {
  /** e.g. `http://127.0.0.1:7421` */
  readonly baseUrl: string
  readonly token: string
}

/**
 * Typed clients for Node (gRPC over HTTP/2), with the bearer token attached to every call.
 *
 * ```ts
 * const palyra = GrpcTransport.makeClient({ baseUrl: "http://127.0.0.1:7421", token })
 * const { runId } = await palyra.gateway.routeMessage({ target: { sessionKey: "ops" }, text: "hello" })
 * ```
 *
 * @since 0.1.0
 * @category Client
 */
export const makeClient = (options: ClientOptions) => {
  const auth: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${options.token}`)
    return next(req)
  }
  // One HTTP/2 session carries every call: its connection window is raised for many streams (clientSession.ts).
  const transport = createGrpcTransport({
    baseUrl: options.baseUrl,
    interceptors: [auth],
    sessionManager: new WideWindowSessionManager(options.baseUrl)
  })
  return {
    gateway: createClient(pb.GatewayService, transport),
    approvals: createClient(pb.ApprovalsService, transport),
    sessions: createClient(pb.SessionsService, transport),
    journal: createClient(pb.JournalService, transport),
    background: createClient(pb.BackgroundService, transport),
    pairing: createClient(pb.PairingService, transport),
    health: createClient(Health, transport)
  }
}
