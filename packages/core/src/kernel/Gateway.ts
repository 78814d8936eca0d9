/**
 * The `Gateway` is the one facade transports call. It binds messages to sessions, admits runs (one
 * at a time per session; later messages queue in order), drives each run with the agent loop,
 * resolves approvals, cancels runs and streams tape events (replay from the journal, then live).
 *
 * Transports stay thin: they translate wire messages into these calls and `TapeEvent`s back.
 *
 * @since 0.1.0
 */
import { Clock, Context, Duration, Effect, Fiber, Layer, Option, PubSub, type Queue, type Scope, Stream } from "effect"
import {
  Conflict,
  InvalidArgument,
  type JournalError,
  NotFound,
  type PayloadTooLarge,
  PermissionDenied
} from "../domain/Errors.js"
import { makeRunId, makeSessionId, type RunId, type SessionId } from "../domain/Ids.js"
import {
  type ApprovalFilter,
  type ApprovalRecord,
  makeSession,
  type Run,
  type RunFilter,
  type Session,
  type SessionFilter
} from "../domain/Records.js"
import { isTerminal } from "../domain/RunState.js"
import type { TapeEvent } from "../domain/TapeEvent.js"
import { Journal, requireRun, requireSession } from "../ports/Journal.js"
import { ModelProvider } from "../ports/ModelProvider.js"
import { PolicyEngine } from "../ports/PolicyEngine.js"
import { ToolRuntime } from "../ports/Tool.js"
import { Approvals, type ResolveRequest } from "./Approvals.js"
import { type ResolvedBudgets, runLoop } from "./internal/loop.js"
import { makeTape } from "./internal/tape.js"

/** Budgets that end a run. Every field has a safe default. @since 0.1.0 @category Models */
export interface Budgets {
  /** Model calls per run (default 24). */
  readonly maxModelTurns?: number | undefined
  /** Tool executions per run (default 64). */
  readonly maxToolCalls?: number | undefined
  /** Tape entries one model response may produce (default 4,000). */
  readonly maxEventsPerTurn?: number | undefined
  /** Wall-clock limit per run (default 30 minutes). */
  readonly wallClock?: Duration.DurationInput | undefined
  /** Tokens per run, checked before each model call with an estimate of the prompt (default 1,000,000). */
  readonly maxTokensPerRun?: number | undefined
  /** Tokens per session, checked the same way (default 10,000,000). */
  readonly maxTokensPerSession?: number | undefined
}

/** @since 0.1.0 @category Models */
export interface Options {
  /** System instructions sent with every model call. */
  readonly instructions?: string | undefined
  readonly budgets?: Budgets | undefined
  /** How long an approval may stay pending before the call is denied (default 10 minutes). */
  readonly approvalTimeout?: Duration.DurationInput | undefined
  /**
   * Deny approval-requiring calls at once when no approval channel is connected for the session
   * (default true: fail closed). See `registerApprover` and `subscribe({ approver: true })`.
   */
  readonly requireApprovalChannel?: boolean | undefined
  /** Coalesce streamed text into deltas of about this many characters (default 48)… */
  readonly coalesceChars?: number | undefined
  /** …or this many milliseconds, whichever comes first (default 40). */
  readonly coalesceMillis?: number | undefined
  /**
   * What to do at start-up with runs the previous process left `InProgress`: mark them `Failed`
   * with code `interrupted` (default), or resume them from their tape. Runs waiting for approval and
   * queued runs always resume.
   */
  readonly onInterruptedRuns?: "fail" | "resume" | undefined
  /** Largest user message accepted, in characters (default 100,000). */
  readonly maxMessageChars?: number | undefined
}

/** @since 0.1.0 @category Models */
export interface ResolveSessionRequest {
  readonly principal: string
  /** Reuse this session (it must belong to `principal`). */
  readonly sessionId?: SessionId | undefined
  /** Reuse the principal's session with this key, or create it. */
  readonly key?: string | undefined
  readonly channel?: string | undefined
  readonly title?: string | undefined
}

/** @since 0.1.0 @category Models */
export interface MessageRequest extends ResolveSessionRequest {
  readonly text: string
}

/** @since 0.1.0 @category Models */
export interface StartedRun {
  readonly session: Session
  readonly run: Run
  /** This run's events, from its admission to its end. */
  readonly events: Stream.Stream<TapeEvent, JournalError>
}

/** @since 0.1.0 @category Models */
export interface SubscribeOptions {
  /** Count this subscriber as an approval channel for the session while it is open. */
  readonly approver?: boolean | undefined
}

/** @since 0.1.0 @category Models */
export type GatewayError = JournalError | NotFound | Conflict | PermissionDenied | InvalidArgument | PayloadTooLarge

/** @since 0.1.0 @category Models */
export interface Service {
  readonly resolveSession: (request: ResolveSessionRequest) => Effect.Effect<Session, GatewayError>
  readonly getSession: (sessionId: SessionId, principal?: string) => Effect.Effect<Session, GatewayError>
  readonly listSessions: (filter: SessionFilter) => Effect.Effect<ReadonlyArray<Session>, GatewayError>
  /** Start a fresh prompt history; the old tape stays for audit. */
  readonly resetSession: (sessionId: SessionId, principal?: string) => Effect.Effect<Session, GatewayError>
  /** A new session whose history starts as the parent's up to `atSeq` (default: all of it). */
  readonly branchSession: (
    sessionId: SessionId,
    options: { readonly principal?: string | undefined; readonly atSeq?: number | undefined; readonly title?: string }
  ) => Effect.Effect<Session, GatewayError>
  readonly archiveSession: (sessionId: SessionId, principal?: string) => Effect.Effect<Session, GatewayError>

  /** Admit a run and stream its events. The caller counts as an approval channel until the run ends. */
  readonly startRun: (request: MessageRequest) => Effect.Effect<StartedRun, GatewayError>
  /** Admit a run without streaming it. */
  readonly sendMessage: (
    request: MessageRequest
  ) => Effect.Effect<{ readonly session: Session; readonly run: Run }, GatewayError>
  readonly cancelRun: (runId: RunId, by: string) => Effect.Effect<Run, GatewayError>
  readonly getRun: (runId: RunId) => Effect.Effect<Run, GatewayError>
  readonly listRuns: (filter: RunFilter) => Effect.Effect<ReadonlyArray<Run>, GatewayError>
  /** Wait for a run to reach a terminal state. */
  readonly awaitRun: (runId: RunId) => Effect.Effect<Run, GatewayError>

  readonly resolveApproval: (request: ResolveRequest) => Effect.Effect<ApprovalRecord, GatewayError>
  readonly getApproval: (approvalId: ApprovalRecord["id"]) => Effect.Effect<ApprovalRecord, GatewayError>
  readonly listApprovals: (filter: ApprovalFilter) => Effect.Effect<ReadonlyArray<ApprovalRecord>, GatewayError>
  /** Standing grants (approvals with scope `session` or `always`), active or revoked. */
  readonly listGrants: (filter: {
    readonly principal?: string | undefined
  }) => Effect.Effect<ReadonlyArray<ApprovalRecord>, GatewayError>
  /** Revoke a standing grant; the change is on the tape and the policy engine forgets it at once. */
  readonly revokeGrant: (approvalId: ApprovalRecord["id"], by: string) => Effect.Effect<ApprovalRecord, GatewayError>
  /** Announce an approval channel for every session (e.g. an operator console) until the scope closes. */
  readonly registerApprover: Effect.Effect<void, never, Scope.Scope>
  /**
   * Every approval that a run starts waiting for, from now until the scope closes. The subscriber
   * counts as an approval channel for every session meanwhile.
   */
  readonly watchApprovals: Effect.Effect<Queue.Dequeue<ApprovalRecord>, never, Scope.Scope>

  /** Replay the session's tape after `afterSeq`, then follow it live. */
  readonly subscribe: (
    sessionId: SessionId,
    afterSeq: number,
    options?: SubscribeOptions
  ) => Stream.Stream<TapeEvent, JournalError>
  readonly readTape: (
    sessionId: SessionId,
    options: { readonly afterSeq: number; readonly limit?: number | undefined }
  ) => Effect.Effect<ReadonlyArray<TapeEvent>, JournalError>
}

/** @since 0.1.0 @category Tags */
export class Gateway extends Context.Tag("@palyra/core/Gateway")<Gateway, Service>() {}

const resolveBudgets = (b: Budgets = {}): ResolvedBudgets => ({
  maxModelTurns: b.maxModelTurns ?? 24,
  maxToolCalls: b.maxToolCalls ?? 64,
  maxEventsPerTurn: b.maxEventsPerTurn ?? 4_000,
  wallClock: Duration.decode(b.wallClock ?? "30 minutes"),
  maxTokensPerRun: b.maxTokensPerRun ?? 1_000_000,
  maxTokensPerSession: b.maxTokensPerSession ?? 10_000_000
})

/**
 * Build a Gateway. Runs live in the returned scope: closing it parks them (their state stays on the
 * tape) so a later Gateway over the same journal picks them up.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = (
  options: Options = {}
): Effect.Effect<
  Service,
  JournalError,
  Journal | ModelProvider | ToolRuntime | PolicyEngine | Approvals | Scope.Scope
> =>
  Effect.gen(function* () {
    const journal = yield* Journal
    const approvals = yield* Approvals
    const tape = yield* makeTape(journal)
    const maxMessageChars = options.maxMessageChars ?? 100_000

    const approvers = new Map<SessionId, number>()
    let globalApprovers = 0
    const addApprover = (sessionId: SessionId, delta: number) => {
      const n = (approvers.get(sessionId) ?? 0) + delta
      if (n <= 0) approvers.delete(sessionId)
      else approvers.set(sessionId, n)
    }

    const approvalRequests = yield* PubSub.unbounded<ApprovalRecord>()
    let syncGrants: Effect.Effect<void> = Effect.void
    const registerApprover = Effect.acquireRelease(
      Effect.sync(() => {
        globalApprovers++
      }),
      () =>
        Effect.sync(() => {
          globalApprovers--
        })
    )

    const deps = {
      journal,
      tape,
      model: yield* ModelProvider,
      tools: yield* ToolRuntime,
      policy: yield* PolicyEngine,
      approvals,
      instructions: options.instructions,
      budgets: resolveBudgets(options.budgets),
      approvalTimeout: Duration.decode(options.approvalTimeout ?? "10 minutes"),
      requireApprovalChannel: options.requireApprovalChannel ?? true,
      coalesceChars: options.coalesceChars ?? 48,
      coalesceMillis: options.coalesceMillis ?? 40,
      hasApprover: (sessionId: SessionId) => globalApprovers > 0 || (approvers.get(sessionId) ?? 0) > 0,
      onApprovalRequested: (record: ApprovalRecord) => PubSub.publish(approvalRequests, record),
      onGrantsChanged: Effect.suspend(() => syncGrants)
    }

    // ---- run admission: one run at a time per session, in order ------------------------------
    const scope = yield* Effect.scope
    const queues = new Map<SessionId, Array<RunId>>()
    const running = new Map<RunId, Fiber.RuntimeFiber<void, unknown>>()
    const active = new Map<SessionId, RunId>()
    const cancels = new Map<RunId, string>()
    const onRunEnd = new Map<RunId, Array<() => void>>()
    const endWaiters = new Map<RunId, Array<(run: Run) => void>>()

    const finished = (runId: RunId) =>
      Effect.gen(function* () {
        running.delete(runId)
        cancels.delete(runId)
        for (const f of onRunEnd.get(runId) ?? []) f()
        onRunEnd.delete(runId)
        const run = yield* journal.getRun(runId).pipe(Effect.option, Effect.map(Option.flatten))
        if (Option.isSome(run) && isTerminal(run.value.state)) {
          for (const f of endWaiters.get(runId) ?? []) f(run.value)
          endWaiters.delete(runId)
        }
      })

    const worker = (sessionId: SessionId): Effect.Effect<void> =>
      Effect.gen(function* () {
        while (true) {
          const queue = queues.get(sessionId)
          const next = queue?.shift()
          if (next === undefined) {
            queues.delete(sessionId)
            return
          }
          const fiber = yield* runLoop(deps, next, () => cancels.get(next)).pipe(Effect.forkIn(scope))
          running.set(next, fiber)
          active.set(sessionId, next)
          yield* Fiber.await(fiber)
          active.delete(sessionId)
          yield* finished(next)
        }
      })

    const enqueue = (sessionId: SessionId, runId: RunId) =>
      Effect.suspend(() => {
        const queue = queues.get(sessionId)
        if (queue !== undefined) {
          queue.push(runId)
          return Effect.void
        }
        queues.set(sessionId, [runId])
        return Effect.asVoid(Effect.forkIn(worker(sessionId), scope))
      })

    // ---- sessions --------------------------------------------------------------------------
    const ownedSession = (sessionId: SessionId, principal: string | undefined) =>
      Effect.gen(function* () {
        const session = yield* requireSession(journal, sessionId)
        if (principal !== undefined && session.principal !== principal) {
          return yield* new PermissionDenied({ message: `session ${sessionId} belongs to another principal` })
        }
        return session
      })

    const newSession = (fields: Partial<Session> & { principal: string }) =>
      Effect.gen(function* () {
        const at = yield* Clock.currentTimeMillis
        const session = makeSession({ id: yield* makeSessionId, createdAt: at, updatedAt: at, ...fields })
        yield* journal.createSession(session)
        return session
      })

    const resolveSession: Service["resolveSession"] = Effect.fn("Gateway.resolveSession", { captureStackTrace: false })(
      function* (request: ResolveSessionRequest) {
        if (request.principal.length === 0) {
          return yield* new InvalidArgument({ message: "principal must not be empty", field: "principal" })
        }
        if (request.sessionId !== undefined) {
          const session = yield* ownedSession(request.sessionId, request.principal)
          if (session.archived) return yield* new Conflict({ message: `session ${session.id} is archived` })
          return session
        }
        if (request.key !== undefined) {
          const existing = yield* journal.findSessionByKey(request.principal, request.key)
          if (Option.isSome(existing)) return existing.value
        }
        return yield* newSession({
          principal: request.principal,
          key: request.key ?? null,
          channel: request.channel ?? null,
          title: request.title ?? null
        }).pipe(
          // Two concurrent creations with one key: the loser reuses the winner's session.
          Effect.catchTag("Conflict", (e) =>
            request.key === undefined
              ? Effect.fail(e)
              : journal
                  .findSessionByKey(request.principal, request.key)
                  .pipe(Effect.flatMap(Option.match({ onNone: () => Effect.fail(e), onSome: Effect.succeed })))
          )
        )
      }
    )

    const updateSession = (session: Session, patch: Partial<Session>) =>
      Effect.gen(function* () {
        const next = { ...session, ...patch, updatedAt: yield* Clock.currentTimeMillis }
        yield* journal.updateSession(next)
        return next
      })

    // ---- runs ------------------------------------------------------------------------------
    const admit = Effect.fn("Gateway.admit", { captureStackTrace: false })(function* (request: MessageRequest) {
      if (request.text.length === 0)
        return yield* new InvalidArgument({ message: "text must not be empty", field: "text" })
      if (request.text.length > maxMessageChars) {
        return yield* new InvalidArgument({
          message: `text is ${request.text.length} characters, over the limit of ${maxMessageChars}`,
          field: "text"
        })
      }
      const session = yield* resolveSession(request)
      const runId = yield* makeRunId
      yield* Effect.annotateCurrentSpan({ sessionId: session.id, runId })
      const at = yield* Clock.currentTimeMillis
      const queuedBehind = queues.get(session.id)?.at(-1) ?? active.get(session.id) ?? null
      const head = yield* journal.headSeq(session.id)
      const run: Run = {
        id: runId,
        sessionId: session.id,
        principal: request.principal,
        state: "Pending",
        input: request.text,
        startSeq: head + 1,
        error: null,
        createdAt: at,
        updatedAt: at
      }
      const base = { sessionId: session.id, runId, at }
      yield* tape.append(
        session.id,
        [
          { _tag: "RunAccepted", ...base, principal: request.principal, queuedBehind },
          { _tag: "RunStateChanged", ...base, from: "Pending", to: "Accepted", reason: "admitted" }
        ],
        { createRun: run, runTransition: { runId, from: "Pending", to: "Accepted" } }
      )
      yield* enqueue(session.id, runId)
      return { session, run: { ...run, state: "Accepted" as const } }
    })

    const runEvents = (run: Run): Stream.Stream<TapeEvent, JournalError> =>
      tape.subscribe(run.sessionId, run.startSeq - 1, { runId: run.id })

    const startRun: Service["startRun"] = (request) =>
      Effect.gen(function* () {
        const { session, run } = yield* admit(request)
        // The caller is an approval channel for this run until it ends or the caller stops listening.
        addApprover(session.id, 1)
        let released = false
        const release = () => {
          if (released) return
          released = true
          addApprover(session.id, -1)
        }
        const hooks = onRunEnd.get(run.id) ?? []
        hooks.push(release)
        onRunEnd.set(run.id, hooks)
        return {
          session,
          run,
          events: runEvents(run).pipe(Stream.ensuring(Effect.sync(release)))
        }
      })

    const cancelRun: Service["cancelRun"] = Effect.fn("Gateway.cancelRun")(function* (runId: RunId, by: string) {
      const run = yield* requireRun(journal, runId)
      if (isTerminal(run.state)) return run
      const fiber = running.get(runId)
      if (fiber !== undefined) {
        cancels.set(runId, by)
        yield* Fiber.interrupt(fiber)
        return yield* requireRun(journal, runId)
      }
      // Queued (not started yet): mark it cancelled; the worker skips terminal runs.
      const at = yield* Clock.currentTimeMillis
      yield* tape.append(
        run.sessionId,
        [
          {
            _tag: "RunStateChanged",
            sessionId: run.sessionId,
            runId,
            at,
            from: run.state,
            to: "Cancelled",
            reason: `cancelled by ${by}`
          }
        ],
        { runTransition: { runId, from: run.state, to: "Cancelled" } }
      )
      const queue = queues.get(run.sessionId)
      if (queue) {
        const i = queue.indexOf(runId)
        if (i >= 0) queue.splice(i, 1)
      }
      yield* finished(runId)
      return yield* requireRun(journal, runId)
    })

    const awaitRun: Service["awaitRun"] = (runId) =>
      Effect.gen(function* () {
        const run = yield* requireRun(journal, runId)
        if (isTerminal(run.state)) return run
        return yield* Effect.async<Run>((resume) => {
          const list = endWaiters.get(runId) ?? []
          const cb = (r: Run) => resume(Effect.succeed(r))
          list.push(cb)
          endWaiters.set(runId, list)
          return Effect.sync(() => {
            const l = endWaiters.get(runId)
            if (l) l.splice(l.indexOf(cb), 1)
          })
        })
      })

    // ---- standing grants, evaluated by the policy engine when it can --------------------------
    const policy = deps.policy
    syncGrants = policy.setGrants
      ? journal.listApprovals({ status: "approved" }).pipe(
          Effect.flatMap((all) => policy.setGrants!(all.filter((a) => a.scope !== "once"))),
          Effect.catchAll((e) => Effect.logError("could not load approval grants", e))
        )
      : Effect.void
    yield* syncGrants

    // Grant changes go on the tape of the session where the grant was given.
    const grantChanged = (record: ApprovalRecord, change: "granted" | "revoked", by: string) =>
      Effect.flatMap(Clock.currentTimeMillis, (at) =>
        tape.append(record.sessionId, [
          {
            _tag: "GrantChanged",
            sessionId: record.sessionId,
            runId: record.runId,
            at,
            approvalId: record.id,
            tool: record.tool,
            change,
            by,
            uses: record.grantUses,
            maxUses: record.grantMaxUses,
            expiresAt: record.grantExpiresAt
          }
        ])
      ).pipe(Effect.catchAll((e) => Effect.logError("could not record a grant change", e)))

    // ---- recovery: pick up what the previous process left ------------------------------------
    const leftOver = yield* journal.listRuns({ states: ["Accepted", "InProgress", "WaitingForApproval"] })
    const ordered = [...leftOver].sort((a, b) => a.sessionId.localeCompare(b.sessionId) || a.startSeq - b.startSeq)
    for (const run of ordered) {
      if (run.state === "InProgress" && (options.onInterruptedRuns ?? "fail") === "fail") {
        const at = yield* Clock.currentTimeMillis
        const message = "the process stopped while this run was in progress"
        yield* tape
          .append(
            run.sessionId,
            [
              { _tag: "RunError", sessionId: run.sessionId, runId: run.id, at, code: "interrupted", message },
              {
                _tag: "RunStateChanged",
                sessionId: run.sessionId,
                runId: run.id,
                at,
                from: "InProgress",
                to: "Failed",
                reason: `interrupted: ${message}`
              }
            ],
            {
              runTransition: {
                runId: run.id,
                from: "InProgress",
                to: "Failed",
                error: { code: "interrupted", message }
              }
            }
          )
          .pipe(Effect.catchAll((e) => Effect.logError("could not mark interrupted run", e)))
        continue
      }
      yield* enqueue(run.sessionId, run.id)
    }

    const service: Service = {
      resolveSession,
      getSession: (id, principal) => ownedSession(id, principal),
      listSessions: (filter) => journal.listSessions(filter),
      resetSession: (id, principal) =>
        Effect.gen(function* () {
          const session = yield* ownedSession(id, principal)
          const head = yield* journal.headSeq(id)
          return yield* updateSession(session, {
            historyFromSeq: head,
            resetGeneration: session.resetGeneration + 1
          })
        }),
      branchSession: (id, o) =>
        Effect.gen(function* () {
          const parent = yield* ownedSession(id, o.principal)
          const head = yield* journal.headSeq(id)
          const atSeq = o.atSeq ?? head
          if (atSeq < 0 || atSeq > head) {
            return yield* new InvalidArgument({ message: `atSeq must be within 0..${head}`, field: "atSeq" })
          }
          return yield* newSession({
            principal: parent.principal,
            channel: parent.channel,
            title: o.title ?? (parent.title === null ? null : `${parent.title} (branch)`),
            parentId: parent.id,
            parentSeq: atSeq
          })
        }),
      archiveSession: (id, principal) =>
        Effect.flatMap(ownedSession(id, principal), (s) => updateSession(s, { archived: true })),
      startRun,
      sendMessage: (request) => admit(request),
      cancelRun,
      getRun: (id) => requireRun(journal, id),
      listRuns: (filter) => journal.listRuns(filter),
      awaitRun,
      resolveApproval: (request) =>
        Effect.tap(approvals.resolve(request), (record) =>
          record.status === "approved" && record.scope !== "once"
            ? Effect.zipRight(grantChanged(record, "granted", request.by), syncGrants)
            : Effect.void
        ),
      listGrants: (filter) =>
        Effect.map(journal.listApprovals({}), (all) =>
          all.filter(
            (a) =>
              a.scope !== "once" &&
              (a.status === "approved" || a.status === "revoked") &&
              (filter.principal === undefined || a.principal === filter.principal)
          )
        ),
      revokeGrant: (id, by) =>
        Effect.gen(function* () {
          const at = yield* Clock.currentTimeMillis
          const record = yield* journal.revokeGrant(id, by, at)
          yield* grantChanged(record, "revoked", by)
          yield* syncGrants
          return record
        }),
      getApproval: (id) =>
        Effect.flatMap(approvals.get(id), (o) =>
          Option.isSome(o) ? Effect.succeed(o.value) : Effect.fail(notFoundApproval(id))
        ),
      listApprovals: (filter) => approvals.list(filter),
      registerApprover,
      watchApprovals: Effect.zipRight(registerApprover, PubSub.subscribe(approvalRequests)),
      subscribe: (sessionId, afterSeq, o) => {
        const stream = tape.subscribe(sessionId, afterSeq)
        if (!o?.approver) return stream
        return Stream.acquireRelease(
          Effect.sync(() => addApprover(sessionId, 1)),
          () => Effect.sync(() => addApprover(sessionId, -1))
        ).pipe(Stream.flatMap(() => stream))
      },
      readTape: (sessionId, o) => journal.readTape(sessionId, { afterSeq: o.afterSeq, limit: o.limit })
    }
    return service
  })

const notFoundApproval = (id: string) => new NotFound({ entity: "approval", id })

/** @since 0.1.0 @category Layers */
export const layer = (
  options: Options = {}
): Layer.Layer<Gateway, JournalError, Journal | ModelProvider | ToolRuntime | PolicyEngine | Approvals> =>
  Layer.scoped(Gateway, make(options))
