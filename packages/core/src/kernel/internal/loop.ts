import { Cause, Clock, Context, Duration, Effect, Exit, FiberRef, type MetricLabel, Option, type Tracer } from "effect"
import type { NonEmptyReadonlyArray } from "effect/Array"
import { digest } from "../../domain/Canonical.js"
import { BudgetExceeded, Conflict, isPalyraError, type PalyraError } from "../../domain/Errors.js"
import { type ApprovalId, makeApprovalId, makeToolCallId, type RunId } from "../../domain/Ids.js"
import { type ApprovalRecord, makeApproval, type Run, type Session } from "../../domain/Records.js"
import type { Redactor } from "../../domain/Redaction.js"
import { isTerminal, type Transition } from "../../domain/RunState.js"
import type { NewTapeEvent, TapeEvent, TapeEventOf } from "../../domain/TapeEvent.js"
import { isTracing, traced } from "../../ports/internal/traced.js"
import { withWriteNow } from "../../ports/internal/writeNow.js"
import {
  type AppendEffects,
  type AppendError,
  type Service as JournalService,
  requireRun,
  requireSession
} from "../../ports/Journal.js"
import {
  type ModelEvent,
  type ModelRequest,
  type Service as ModelService,
  runIntoNow
} from "../../ports/ModelProvider.js"
import type { Decision, Service as PolicyService } from "../../ports/PolicyEngine.js"
import type { AnyTool, Service as ToolService } from "../../ports/Tool.js"
import type * as Agents from "../Agents.js"
import { route } from "../Agents.js"
import type { Service as ApprovalsService } from "../Approvals.js"
import { acceptedWith } from "../Attachments.js"
import * as Metrics from "../Metrics.js"
import type { Service as PromptService } from "../PromptAssembler.js"
import * as RunView from "../RunView.js"
import type { HistoryCache } from "./historyCache.js"
import { policyRequestFor } from "./policyRequest.js"
import type { StartGate } from "./startGate.js"
import type { AppendWith, Tape } from "./tape.js"
import { cancelOutsideLoop, closeOpenWork, recordTransition } from "./transition.js"

/** @internal */
export interface LoopDeps {
  readonly journal: JournalService
  readonly tape: Tape
  /** Each run is answered by its session's agent: its instructions, models, tools and budgets. */
  readonly agents: Agents.Service
  readonly tools: ToolService
  readonly policy: PolicyService
  readonly approvals: ApprovalsService
  readonly prompt: PromptService
  /** Streamed text is redacted as it arrives, so no secret is ever split across two stored deltas. */
  readonly redactor: Redactor
  readonly approvalTimeout: Duration.Duration
  readonly requireApprovalChannel: boolean
  readonly coalesceChars: number
  readonly coalesceMillis: number
  readonly hasApprover: (sessionId: Session["id"], principal: string) => boolean
  readonly onApprovalRequested: (record: ApprovalRecord) => Effect.Effect<unknown>
  /** Reload standing grants into the policy engine (after one was used up or went stale). */
  readonly onGrantsChanged: Effect.Effect<void>
  /** Recently active sessions' prompt history, read incrementally (default: the whole tape each run). */
  readonly history?: HistoryCache | undefined
  /** Run starts (the `Start` transition) take their turn here, bounded (`startGate.ts`). */
  readonly startGate?: StartGate | undefined
}

type CallView = RunView.CallView
type Events = NonEmptyReadonlyArray<NewTapeEvent>

/**
 * One run in progress: its dependencies, its session's prompt history, and its `RunView` — the
 * fold of what it wrote. Every write goes through `emit`, which keeps both up to date; every state
 * change goes through `transition`, the one place that consults the state machine and writes the
 * compare-and-set effect with its `RunStateChanged`.
 */
interface RunContext {
  readonly deps: LoopDeps
  readonly agent: Agents.ResolvedAgent
  readonly run: Run
  readonly session: Session
  readonly history: Array<TapeEvent>
  /** Advanced in place (`RunView.advance`): the run's own fold, read by nothing outside it. */
  readonly view: RunView.Mutable
  /**
   * Events that commit with the run's next write instead of their own append (journal first still:
   * nobody sees them before that commit). A `ModelRequest` waits for the model's first output, and
   * an answer that proposes tool calls waits for its first call's decision, so a model call costs
   * no commit of its own. They are folded into `view` when staged (the loop's next step depends on
   * them) and into `history` when committed (the prompt is built only from committed events).
   */
  staged: Array<NewTapeEvent>
  /** Tokens the staged events add to the session: they commit with them. */
  stagedTokens: number
  /**
   * The run's clock, read once at its start: each step reads the time synchronously from it instead
   * of looking the `Clock` service up again (the same clock: a `TestClock` still drives it).
   */
  readonly clock: Clock.Clock
  /** Whether a tracer reads spans: per-step span annotations (a span look-up each) are skipped when none does. */
  readonly tracing: boolean
  /** The run's metric labels, read once at its start: the per-step metrics are recorded as plain calls. */
  readonly metricLabels: ReadonlyArray<MetricLabel.MetricLabel>
  /**
   * The session's committed token count for `maxTokensPerSession`, as of the session's tape at `seq`:
   * every append up to `seq` is counted (a read of the session record taken after the head read as
   * `seq`, plus the tokens of the run's own commits that followed it without a gap). `seq` is -1 when
   * unknown. A model call uses it while the session's head is still `seq` — nobody else appended,
   * and tokens only change with an append — and reads the record again otherwise (`sessionTokens`).
   */
  tokens: { used: number; seq: number }
}

/**
 * `traced` for the per-step spans, decided once per run: without a tracer the effect runs as it is
 * (no tracer look-up per call).
 */
const spanned =
  (ctx: RunContext, name: string, options?: Tracer.SpanOptions) =>
  <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    ctx.tracing ? Effect.withSpan(self, name, options) : self

/** The run clock's time now, in milliseconds (a plain read, no Effect step). */
const nowOf = (ctx: RunContext): number => ctx.clock.unsafeCurrentTimeMillis()

const base = (ctx: RunContext) => ({ sessionId: ctx.session.id, runId: ctx.run.id })

/** Fold what was stored into the run's history, and into its view unless it was folded when staged. */
const observe = (ctx: RunContext, stored: ReadonlyArray<TapeEvent>, stagedCount: number, addTokens = 0) => {
  // The run's own commit carries the session's token count forward when it follows the count's seq
  // directly; after a gap (someone else appended) the count is unknown until read again.
  const t = ctx.tokens
  if (t.seq >= 0 && stored.length > 0 && stored[0]!.tapeSeq === t.seq + 1) {
    t.used += addTokens
    t.seq = stored[stored.length - 1]!.tapeSeq
  } else t.seq = -1
  for (let i = 0; i < stored.length; i++) {
    const e = stored[i]!
    ctx.history.push(e)
    if (i >= stagedCount) RunView.advance(ctx.view, e)
    else if (e._tag === "ToolProposed") {
      // The view holds the staged proposal: give it the stored event (with its tapeSeq).
      const calls = ctx.view.calls
      for (let j = calls.length - 1; j >= 0; j--) {
        const c = calls[j]!
        if (c.proposed.toolCallId === e.toolCallId) {
          calls[j] = { ...c, proposed: e }
          break
        }
      }
    }
  }
}

/** Hold events (and the tokens they add) for the run's next write; the view sees them now. */
const stage = (ctx: RunContext, events: ReadonlyArray<NewTapeEvent>, addTokens = 0) => {
  for (const e of events) {
    ctx.staged.push(e)
    // Only a proposal is kept by the view (until its stored event replaces it): give it a tapeSeq.
    RunView.advance(ctx.view, (e._tag === "ToolProposed" ? { ...e, tapeSeq: 0 } : e) as TapeEvent)
  }
  ctx.stagedTokens += addTokens
}

/** Take what is staged: its events go ahead of the write's own, its tokens into its effects. */
const takeStaged = <E extends AppendEffects>(ctx: RunContext, events: ReadonlyArray<NewTapeEvent>, effects: E) => {
  const count = ctx.staged.length
  if (count === 0) return { events, effects, count, tokens: 0 }
  const all = [...ctx.staged, ...events]
  const tokens = ctx.stagedTokens
  ctx.staged = []
  ctx.stagedTokens = 0
  return {
    events: all,
    effects: tokens === 0 ? effects : { ...effects, addTokens: (effects.addTokens ?? 0) + tokens },
    count,
    tokens
  }
}

/**
 * A write that failed committed nothing (an append is atomic): what it took from the stage goes
 * back in front of whatever was staged since, so the run's next write (its failure, its
 * cancellation) still carries it in tape order — the view already counts those events.
 */
const unstage = (
  ctx: RunContext,
  write: { readonly events: ReadonlyArray<NewTapeEvent>; readonly count: number; readonly tokens: number }
) =>
  Effect.sync(() => {
    if (write.count === 0) return
    ctx.staged = [...write.events.slice(0, write.count), ...ctx.staged]
    ctx.stagedTokens += write.tokens
  })

// A write and what the run learns from it are one step that an interruption (cancel, the
// wall-clock budget, shutdown) cannot split: a committed write the run did not observe would leave
// its view behind the tape (its cancellation recorded from a stale state), and staged events taken
// for a write that never happened would be lost. Interruption takes effect after the write.
const emit = (ctx: RunContext, events: Events, effects: AppendEffects = {}) =>
  Effect.uninterruptible(
    Effect.suspend(() => {
      const write = takeStaged(ctx, events, effects)
      return Effect.map(ctx.deps.tape.append(ctx.session.id, write.events as Events, write.effects), (stored) =>
        observe(ctx, stored, write.count, write.effects.addTokens)
      ).pipe(Effect.onError(() => unstage(ctx, write)))
    })
  )

/**
 * `emit` for the loop's streamed deltas, from inside an uninterruptible region (`writeHeld`): one
 * `Effect.async` around the tape's plain append (`Tape.appendWith`), the run's view updated in its
 * callback — not `emit`'s four Effect steps and their continuations. At 200 paced streams those
 * per-delta Effect objects were most of the young garbage behind the main thread's scavenges
 * (PERF-NOTES round 15, slice P). Without the plain append (a decorated journal), `emit`.
 */
const emitHeld = (ctx: RunContext, events: Events): Effect.Effect<void, AppendError> => {
  const appendWith = ctx.deps.tape.appendWith
  if (appendWith === undefined) return emit(ctx, events)
  return Effect.async<void, AppendError>((resume) => emitHeldWith(appendWith, ctx, events, resume))
}

/** `emitHeld`'s write as a plain call: `done` gets its exit once the run's view has observed it. */
const emitHeldWith = (
  appendWith: AppendWith,
  ctx: RunContext,
  events: Events,
  done: (exit: Exit.Exit<void, AppendError>) => void
) => {
  const write = takeStaged<AppendEffects>(ctx, events, {})
  appendWith(ctx.session.id, write.events as Events, write.effects, (exit) => {
    if (Exit.isFailure(exit)) {
      ctx.staged = write.count === 0 ? ctx.staged : [...write.events.slice(0, write.count), ...ctx.staged]
      ctx.stagedTokens += write.tokens
      return done(exit)
    }
    try {
      observe(ctx, exit.value, write.count, write.effects.addTokens)
    } catch (defect) {
      return done(Exit.die(defect))
    }
    done(Exit.void)
  })
}

/** What writing a streamed delta can fail with. */
type SinkError = Effect.Effect.Error<ReturnType<typeof emit>> | BudgetExceeded

const transition = (
  ctx: RunContext,
  event: Transition,
  reason: string,
  extra: ReadonlyArray<NewTapeEvent> = [],
  effects: Omit<AppendEffects, "runTransition"> = {},
  error?: { readonly code: string; readonly message: string }
) =>
  Effect.uninterruptible(
    Effect.suspend(() => {
      const write = takeStaged(ctx, extra, effects)
      return Effect.map(
        recordTransition(ctx.deps.tape, base(ctx), ctx.view.state, event, reason, {
          extra: write.events,
          effects: write.effects,
          error,
          metricLabels: ctx.metricLabels
        }),
        (stored) => observe(ctx, stored, write.count, write.effects.addTokens)
      ).pipe(Effect.onError(() => unstage(ctx, write)))
    })
  )

// ---- tool calls -------------------------------------------------------------------------------

const result = (
  ctx: RunContext,
  call: CallView,
  status: TapeEventOf<"ToolResult">["status"],
  output: string,
  durationMs = 0,
  truncated = false
): Effect.Effect<void, PalyraError> => Effect.suspend(() => resultNow(ctx, call, status, output, durationMs, truncated))

/** `result` built when it runs: for callers already running (a `flatMap`/`matchEffect` callback). */
const resultNow = (
  ctx: RunContext,
  call: CallView,
  status: TapeEventOf<"ToolResult">["status"],
  output: string,
  durationMs: number,
  truncated = false
): Effect.Effect<void, PalyraError> =>
  emit(ctx, [
    {
      _tag: "ToolResult",
      ...base(ctx),
      at: nowOf(ctx),
      toolCallId: call.proposed.toolCallId,
      tool: call.proposed.tool,
      status,
      output,
      truncated,
      durationMs
    }
  ])

const execute = (
  ctx: RunContext,
  call: CallView,
  tool: AnyTool,
  prefix: ReadonlyArray<NewTapeEvent> = [],
  instant = false
) => spanned(ctx, "AgentLoop.execute")(executeSteps(ctx, call, tool, prefix, instant))

/**
 * Whether a call's decision and start may commit with its result instead of before it runs (one
 * append fewer per tool call): only a plain policy allow (no grant used) of a tool that declares
 * itself `instant` (no I/O, no side effect: nothing outside the process can see it run before the
 * commit) and is low-risk and idempotent (a crash before the commit loses nothing a re-run would
 * not redo). Every other tool's decision and start are durable before it runs.
 */
const commitsWithResult = (tool: AnyTool): boolean =>
  tool.instant === true && tool.risk === "low" && tool.idempotency === "idempotent"

// The tool step is plain steps chained with `flatMap` (no generator per call): Effect only where it
// awaits (the append, the tool). Its started event and its result are each one `emit`.
const executeSteps = (
  ctx: RunContext,
  call: CallView,
  tool: AnyTool,
  prefix: ReadonlyArray<NewTapeEvent>,
  instant: boolean
): Effect.Effect<void, PalyraError> => {
  const { budgets } = ctx.agent
  if (ctx.view.toolCallsStarted >= budgets.maxToolCalls) {
    return Effect.fail(
      new BudgetExceeded({ budget: "maxToolCalls", limit: budgets.maxToolCalls, used: ctx.view.toolCallsStarted })
    )
  }
  const startedAt = nowOf(ctx)
  const started: NewTapeEvent = {
    _tag: "ToolStarted",
    ...base(ctx),
    at: startedAt,
    toolCallId: call.proposed.toolCallId,
    tool: tool.name,
    attempt: (call.started?.attempt ?? 0) + 1
  }
  const run = ctx.deps.tools.execute(tool, call.proposed.args, {
    sessionId: ctx.session.id,
    runId: ctx.run.id,
    toolCallId: call.proposed.toolCallId,
    principal: ctx.run.principal,
    note: (text) =>
      Effect.suspend(() =>
        emit(ctx, [{ _tag: "SessionNote", ...base(ctx), at: nowOf(ctx), author: `tool:${tool.name}`, text }])
      ).pipe(Effect.orDie)
  })
  const finished = Effect.matchEffect(run, {
    onSuccess: (outcome) => {
      const durationMs = nowOf(ctx) - startedAt
      Metrics.unsafeRecord.toolCall(tool.name, "ok", durationMs, ctx.metricLabels)
      return resultNow(ctx, call, "ok", outcome.output, durationMs, outcome.truncated)
    },
    onFailure: (error) => {
      const durationMs = nowOf(ctx) - startedAt
      Metrics.unsafeRecord.toolCall(tool.name, "error", durationMs, ctx.metricLabels)
      return resultNow(ctx, call, "error", `${error.reason}: ${error.message}`, durationMs)
    }
  })
  const opening = (prefix.length === 0 ? [started] : [...prefix, started]) as unknown as Events
  if (instant) {
    // Staged, not appended: the decision and start commit with the result (or with whatever the
    // run writes first — a note, its cancellation — in tape order), after the tool ran.
    stage(ctx, opening)
    return finished
  }
  return Effect.zipRight(emit(ctx, opening), finished)
}

const grantUse = (ctx: RunContext, g: ApprovalRecord, at: number) => {
  const exhausted = g.grantMaxUses !== null && g.grantUses >= g.grantMaxUses
  const event = (change: "used" | "exhausted"): NewTapeEvent => ({
    _tag: "GrantChanged",
    ...base(ctx),
    at,
    approvalId: g.id,
    tool: g.tool,
    change,
    by: ctx.run.principal,
    uses: g.grantUses,
    maxUses: g.grantMaxUses,
    expiresAt: g.grantExpiresAt
  })
  return { extra: exhausted ? [event("used"), event("exhausted")] : [event("used")], exhausted }
}

interface Decided {
  readonly decision: Decision
  readonly extra: Array<NewTapeEvent>
  readonly exhausted: boolean
}

/** Ask the policy engine; when a standing grant allowed the call, count the use (compare-and-set). */
const decide = (ctx: RunContext, call: CallView, tool: AnyTool): Effect.Effect<Decided, PalyraError> =>
  spanned(ctx, "AgentLoop.policy", {
    attributes: { tool: tool.name, toolCallId: call.proposed.toolCallId },
    captureStackTrace: false
  })(decideSteps(ctx, call, tool, false))

const decideSteps = (
  ctx: RunContext,
  call: CallView,
  tool: AnyTool,
  retried: boolean
): Effect.Effect<Decided, PalyraError> =>
  Effect.flatMap(
    ctx.deps.policy.decide(
      policyRequestFor(ctx.session, tool, call.proposed.args, {
        principal: ctx.run.principal,
        argsDigest: call.proposed.argsDigest
      })
    ),
    (decision) => {
      Metrics.unsafeRecord.policyDecision(decision.decision, ctx.metricLabels)
      const grantId =
        decision.decision === "allow" ? decision.policyIds.find((id) => id.startsWith("grant:")) : undefined
      if (grantId === undefined) return Effect.succeed({ decision, extra: [], exhausted: false })
      return useGrantFor(ctx, call, tool, retried, decision, grantId)
    }
  )

/** A standing grant allowed the call: count its use, or decide again when it no longer applies. */
const useGrantFor = (
  ctx: RunContext,
  call: CallView,
  tool: AnyTool,
  retried: boolean,
  decision: Decision,
  grantId: string
): Effect.Effect<Decided, PalyraError> =>
  Effect.gen(function* () {
    const { deps } = ctx
    const at = nowOf(ctx)
    const used = yield* deps.journal.useGrant(grantId.slice("grant:".length) as ApprovalId, at).pipe(Effect.either)
    if (used._tag === "Left") {
      // Revoked, expired or used up since the engine last heard: refresh and decide again.
      yield* deps.onGrantsChanged
      if (!retried) return yield* decideSteps(ctx, call, tool, true)
      return {
        decision: { decision: "deny" as const, policyIds: [grantId], reasons: ["the grant no longer applies"] },
        extra: [],
        exhausted: false
      }
    }
    return { decision, ...grantUse(ctx, used.right, at) }
  })

const awaitApproval = (ctx: RunContext, call: CallView, approvalId: ApprovalId) =>
  Effect.gen(function* () {
    const record = yield* Effect.acquireUseRelease(
      Metrics.changeApprovalsPending(1),
      () => ctx.deps.approvals.await(approvalId),
      () => Metrics.changeApprovalsPending(-1)
    )
    const decision = record.status === "approved" ? "approved" : record.status === "denied" ? "denied" : "expired"
    const resolved: NewTapeEvent = {
      _tag: "ApprovalResolved",
      ...base(ctx),
      at: nowOf(ctx),
      approvalId,
      toolCallId: call.proposed.toolCallId,
      decision,
      scope: record.scope,
      by: record.resolver ?? "system",
      reason: record.reason ?? decision
    }
    if (ctx.view.state === "WaitingForApproval")
      yield* transition(ctx, "ApprovalResolved", `approval ${decision}`, [resolved])
    else yield* emit(ctx, [resolved])
    return record.status === "approved" ? ("approved" as const) : ("denied" as const)
  }).pipe(traced("AgentLoop.approvalWait", { attributes: { approvalId }, captureStackTrace: false }))

const requestApproval = (ctx: RunContext, call: CallView, tool: AnyTool) =>
  Effect.gen(function* () {
    const { deps } = ctx
    const grant = yield* deps.approvals.findGrant({
      sessionId: ctx.session.id,
      principal: ctx.run.principal,
      tool: tool.name,
      argsDigest: call.proposed.argsDigest
    })
    const at = nowOf(ctx)
    const usable = Option.isSome(grant)
      ? yield* deps.journal.useGrant(grant.value.id, at).pipe(Effect.option)
      : Option.none<ApprovalRecord>()
    if (Option.isSome(grant) && Option.isSome(usable)) {
      const { extra, exhausted } = grantUse(ctx, usable.value, at)
      yield* emit(ctx, [
        ...extra,
        {
          _tag: "ApprovalResolved",
          ...base(ctx),
          at,
          approvalId: grant.value.id,
          toolCallId: call.proposed.toolCallId,
          decision: "approved",
          scope: grant.value.scope,
          by: `grant:${grant.value.id}`,
          reason: `covered by an earlier ${grant.value.scope}-scope approval`
        }
      ] as unknown as Events)
      if (exhausted) yield* deps.onGrantsChanged
      return "approved" as const
    }
    const approvalId = yield* makeApprovalId
    const expiresAt = at + Duration.toMillis(deps.approvalTimeout)
    const summary = `${tool.name} ${JSON.stringify(call.proposed.args).slice(0, 300)}`
    const record = makeApproval({
      id: approvalId,
      sessionId: ctx.session.id,
      runId: ctx.run.id,
      toolCallId: call.proposed.toolCallId,
      principal: ctx.run.principal,
      tool: tool.name,
      argsDigest: call.proposed.argsDigest,
      risk: tool.risk,
      summary,
      requestedAt: at,
      expiresAt
    })
    const requested: NewTapeEvent = {
      _tag: "ApprovalRequested",
      ...base(ctx),
      at,
      approvalId,
      toolCallId: call.proposed.toolCallId,
      tool: tool.name,
      risk: tool.risk,
      argsDigest: call.proposed.argsDigest,
      summary,
      expiresAt
    }
    if (deps.requireApprovalChannel && !deps.hasApprover(ctx.session.id, ctx.run.principal)) {
      // Fail closed: nobody can answer now. The pending record stays for an operator to grant.
      yield* emit(ctx, [requested], { createApproval: record })
      return "no-channel" as const
    }
    yield* transition(ctx, "AwaitApproval", `waiting for approval ${approvalId}`, [requested], {
      createApproval: record
    })
    yield* deps.onApprovalRequested(record)
    return yield* awaitApproval(ctx, call, approvalId)
  })

/** Take one tool call from wherever its tape says it is to its result. */
const toolCall = (ctx: RunContext, call: CallView): Effect.Effect<void, PalyraError> =>
  ctx.tracing
    ? Effect.withSpan(
        Effect.zipRight(
          Effect.annotateCurrentSpan({ tool: call.proposed.tool, toolCallId: call.proposed.toolCallId }),
          toolCallSteps(ctx, call)
        ),
        "AgentLoop.toolCall"
      )
    : toolCallSteps(ctx, call)

// Plain steps (no generator): the common path — a fresh proposal, decided, allowed, run — is the
// decision's await, then `execute`'s.
const toolCallSteps = (ctx: RunContext, call: CallView): Effect.Effect<void, PalyraError> => {
  // A tool outside the agent's list is unknown to it: never offered, never run.
  const tool = ctx.agent.allows(call.proposed.tool) ? ctx.deps.tools.get(call.proposed.tool) : Option.none()
  if (Option.isNone(tool)) return result(ctx, call, "error", `unknown tool: ${call.proposed.tool}`)
  if (call.started) {
    // Started before the process stopped, with no result: never re-run blindly.
    if (tool.value.idempotency === "idempotent") return execute(ctx, call, tool.value)
    return result(ctx, call, "interrupted", "interrupted: the process stopped during this call; outcome unknown")
  }
  if (call.decided === undefined) {
    return Effect.flatMap(decide(ctx, call, tool.value), ({ decision, exhausted, extra }) => {
      const decided: NewTapeEvent = {
        _tag: "PolicyDecided",
        ...base(ctx),
        at: nowOf(ctx),
        toolCallId: call.proposed.toolCallId,
        tool: tool.value.name,
        decision: decision.decision,
        policyIds: [...decision.policyIds],
        reasons: [...decision.reasons]
      }
      if (decision.decision === "allow") {
        // An allowed call's decision (and any grant use) and its start commit together, before it
        // runs — or, for an instant tool allowed by policy alone, with its result (`commitsWithResult`).
        const ran =
          extra.length === 0
            ? execute(ctx, call, tool.value, [decided], commitsWithResult(tool.value))
            : execute(ctx, call, tool.value, [decided, ...extra])
        return exhausted ? Effect.zipRight(ran, ctx.deps.onGrantsChanged) : ran
      }
      const written = emit(ctx, [decided])
      if (decision.decision === "deny") {
        return Effect.zipRight(written, result(ctx, call, "denied", `denied by policy: ${decision.reasons.join("; ")}`))
      }
      return Effect.zipRight(written, approvalThenRun(ctx, call, tool.value))
    })
  }
  if (call.decided.decision === "deny") {
    return result(ctx, call, "denied", `denied by policy: ${call.decided.reasons.join("; ")}`)
  }
  if (call.decided.decision === "allow") return execute(ctx, call, tool.value)
  return approvalThenRun(ctx, call, tool.value)
}

const approvalThenRun = (ctx: RunContext, call: CallView, tool: AnyTool) =>
  Effect.gen(function* () {
    let outcome: "approved" | "denied" | "no-channel"
    if (call.resolved) outcome = call.resolved.decision === "approved" ? "approved" : "denied"
    else if (call.requested) {
      // Resumed while waiting: announce the pending approval again to whoever watches now.
      const pending = yield* ctx.deps.approvals.get(call.requested.approvalId)
      if (Option.isSome(pending) && pending.value.status === "pending")
        yield* ctx.deps.onApprovalRequested(pending.value)
      outcome = yield* awaitApproval(ctx, call, call.requested.approvalId)
    } else outcome = yield* requestApproval(ctx, call, tool)
    if (outcome === "approved") return yield* execute(ctx, call, tool)
    if (outcome === "no-channel") {
      return yield* result(
        ctx,
        call,
        "denied",
        "approval required, but no approval channel is connected for this session"
      )
    }
    const latest = ctx.view.calls.find((c) => c.proposed.toolCallId === call.proposed.toolCallId)?.resolved
    return yield* result(
      ctx,
      call,
      "denied",
      latest ? `approval ${latest.decision}: ${latest.reason}` : "approval not granted"
    )
  })

// ---- model turns ------------------------------------------------------------------------------

/** What one model call answered. */
interface Answer {
  readonly text: string
  readonly finishReason: string
  readonly inputTokens: number
  readonly outputTokens: number
  readonly proposed: ReadonlyArray<{ readonly providerId: string; readonly name: string; readonly args: unknown }>
  /** Streamed text not written yet: it commits with the answer's message (one append, not two). */
  readonly tail: string
}

/**
 * One model call, its text streamed onto the tape as it arrives: redacted as it streams (a possible
 * secret is held back until it is complete) and coalesced into deltas of about `coalesceChars`
 * characters or `coalesceMillis`. `received` counts what the model sent, so a call that failed
 * before sending anything can fail over to the next model.
 */
/** Text the loop joins into one append at most when deltas arrive together (see `streamAnswer`). */
const maxHeldChars = 16 * 1024

const streamAnswer = (
  ctx: RunContext,
  model: ModelService,
  request: ModelRequest,
  turn: number,
  received: { count: number }
): Effect.Effect<Answer, PalyraError> =>
  Effect.suspend(() => {
    const { deps } = ctx
    const b = ctx.agent.budgets
    const safe = deps.redactor.streaming()
    let text = ""
    let buffer = ""
    let bufferSince = 0
    let eventsThisTurn = 0
    let finishReason = "stop"
    let inputTokens = 0
    let outputTokens = 0
    const proposed: Array<{ providerId: string; name: string; args: unknown }> = []
    const overBudget = () =>
      Effect.fail(new BudgetExceeded({ budget: "maxEventsPerTurn", limit: b.maxEventsPerTurn, used: eventsThisTurn }))
    // The clock is read once from the context; each delta then reads it synchronously.
    const clock = ctx.clock
    // Deltas made while the provider says `more` (the next event is at hand, e.g. the same read):
    // written together, one append, when a call without `more` comes — never held past that call,
    // so a delta is appended when it is read, not later.
    // At most the tape's burst limit of them, and about `maxHeldChars` of text: a long commit would
    // hold up the journal's writer, and with it every other session's events.
    let pending: Array<NewTapeEvent> = []
    let pendingChars = 0
    // The held deltas are taken when the write runs, inside an uninterruptible region, not when it
    // is handed to the provider: a write the provider never runs (the call was interrupted between
    // getting it and running it) leaves them held, for the call's end to write.
    const writeHeldEffect = Effect.uninterruptible(
      Effect.suspend(() => {
        if (pending.length === 0) return Effect.void
        const events: ReadonlyArray<NewTapeEvent> = pending
        pending = []
        pendingChars = 0
        return emitHeld(ctx, events as Events)
      })
    )
    // Its plain form (`withWriteNow`), over the tape's plain append: a provider pushing deltas from
    // plain callbacks (the paced scripted model's timer) writes each without resuming its fiber.
    const appendWith = deps.tape.appendWith
    const writeHeld =
      appendWith === undefined
        ? writeHeldEffect
        : withWriteNow(writeHeldEffect, (done) => {
            if (pending.length === 0) return done(Exit.void)
            const events: ReadonlyArray<NewTapeEvent> = pending
            pending = []
            pendingChars = 0
            emitHeldWith(appendWith, ctx, events as Events, done)
          })
    const writePending = (): Effect.Effect<void, SinkError> | undefined =>
      pending.length === 0 ? undefined : writeHeld
    const hold = (more: boolean | undefined) => (more ? undefined : writePending())
    // Make what is buffered one delta (counted against the turn's event budget) and write it with
    // the held ones unless `more`: `undefined` when nothing is to be written, else the write (or
    // the held deltas' write, then the budget's failure) the provider runs next.
    const flushAt = (at: number, more?: boolean): Effect.Effect<void, SinkError> | undefined => {
      if (buffer.length === 0) return hold(more)
      const chunk = buffer
      buffer = ""
      if (++eventsThisTurn > b.maxEventsPerTurn) {
        const held = writePending()
        return held === undefined ? overBudget() : Effect.zipRight(held, overBudget())
      }
      // `emit` takes what is staged inside its uninterruptible region, not here: an interruption
      // between this call and the write's start (the runtime may yield there) loses nothing staged.
      pending.push({ _tag: "AssistantDelta", ...base(ctx), at, turn, text: chunk })
      pendingChars += chunk.length
      return pending.length < deps.tape.burstLimit && pendingChars < maxHeldChars ? hold(more) : writePending()
    }
    const propose = (event: Extract<ModelEvent, { type: "tool-call" }>): Effect.Effect<void, SinkError> | undefined => {
      if (++eventsThisTurn > b.maxEventsPerTurn) return overBudget()
      proposed.push({ providerId: event.id, name: event.name, args: event.args })
      return undefined
    }
    // The per-event hot path is a plain sink (`SinkNow`): the provider calls it when the event is
    // due, so its work happens then. A delta that is only buffered (coalescing, or redaction holding
    // back a possible secret) returns nothing and costs no Effect step; one that flushes returns its
    // write, which the provider runs before its next event — or, when the provider says `more`,
    // joins it to the next event's write.
    const onEvent = (event: ModelEvent, more?: boolean): Effect.Effect<void, SinkError> | undefined => {
      received.count++
      switch (event.type) {
        case "text-delta": {
          const t = clock.unsafeCurrentTimeMillis()
          text += event.text
          const released = safe.push(event.text)
          if (released.length === 0) return hold(more)
          if (buffer.length === 0) bufferSince = t
          buffer += released
          return buffer.length >= deps.coalesceChars || t - bufferSince >= deps.coalesceMillis
            ? flushAt(t, more)
            : hold(more)
        }
        case "tool-call": {
          // Flush the buffer, count the call, then record it, in that order.
          buffer += safe.flush()
          const flushed = flushAt(clock.unsafeCurrentTimeMillis())
          return flushed === undefined
            ? propose(event)
            : Effect.zipRight(
                flushed,
                Effect.suspend(() => propose(event) ?? Effect.void)
              )
        }
        case "usage":
          inputTokens += event.inputTokens
          outputTokens += event.outputTokens
          return hold(more)
        case "finish":
          finishReason = event.reason
          return hold(more)
      }
    }
    const answered = Effect.suspend((): Effect.Effect<Answer, SinkError> => {
      // Held deltas are written by the provider's last call (it says no `more`); a provider that
      // broke that promise still gets them written, ahead of the answer.
      const held = writePending()
      buffer += safe.flush()
      const answer: Answer = { text, finishReason, inputTokens, outputTokens, proposed, tail: buffer }
      const result = buffer.length > 0 && ++eventsThisTurn > b.maxEventsPerTurn ? overBudget() : Effect.succeed(answer)
      return held === undefined ? result : Effect.zipRight(held, result)
    })
    // A call that fails or is interrupted while deltas are held (a provider may fail, or be
    // interrupted between two calls, after saying `more`) still writes them, in a finalizer (so
    // uninterruptibly) before the call's end is handled: the tape has every delta the model sent, as
    // when each was written on its own. A write that fails here leaves the call's own failure to
    // report.
    const call = Effect.onExit(runIntoNow(model, request, onEvent), (exit) => {
      if (exit._tag === "Success") return Effect.void
      const held = writePending()
      return held === undefined ? Effect.void : Effect.ignore(held)
    })
    return Effect.zipRight(call, answered)
  })

/**
 * The session's committed token count for a model call's budget check: the run's carried count
 * (`RunContext.tokens`) while the session's head is where it was counted — a map look-up in the
 * journal, no SQL — else the session record, read after its head (so the count covers at least
 * every append up to that head; an append the read saw beyond it shows as a gap, and the next call
 * reads again). The same committed tokens the per-call record read counted, without the read.
 */
const sessionTokens = (ctx: RunContext): Effect.Effect<number, PalyraError> => {
  const { journal } = ctx.deps
  const id = ctx.session.id
  const reread = Effect.flatMap(journal.headSeq(id), (head) =>
    Effect.map(requireSession(journal, id), (current) => {
      ctx.tokens = { used: current.tokensUsed, seq: head }
      return current.tokensUsed
    })
  )
  const t = ctx.tokens
  if (t.seq < 0) return reread
  return Effect.flatMap(journal.headSeq(id), (head) => (head === t.seq ? Effect.succeed(t.used) : reread))
}

const modelTurn = (ctx: RunContext) => spanned(ctx, "AgentLoop.modelTurn")(modelTurnSteps(ctx))

// Plain steps (no generator): Effect only at the awaits — the prompt, the session read, the model's
// stream, the answer's write.
const modelTurnSteps = (ctx: RunContext): Effect.Effect<void, PalyraError> => {
  const { deps, view, agent } = ctx
  const b = agent.budgets
  if (view.turn >= b.maxModelTurns) {
    return Effect.fail(new BudgetExceeded({ budget: "maxModelTurns", limit: b.maxModelTurns, used: view.turn }))
  }
  const assembled = deps.prompt.assemble({
    session: ctx.session,
    runId: ctx.run.id,
    history: ctx.history,
    instructions: agent.instructions,
    tools: agent.toolSpecs
  })
  return Effect.flatMap(assembled, ({ request, estimatedTokens }) => {
    if (view.tokens + estimatedTokens > b.maxTokensPerRun) {
      return Effect.fail(
        new BudgetExceeded({ budget: "maxTokensPerRun", limit: b.maxTokensPerRun, used: view.tokens + estimatedTokens })
      )
    }
    return Effect.flatMap(sessionTokens(ctx), (tokensUsed) => {
      if (tokensUsed + estimatedTokens > b.maxTokensPerSession) {
        return Effect.fail(
          new BudgetExceeded({
            budget: "maxTokensPerSession",
            limit: b.maxTokensPerSession,
            used: tokensUsed + estimatedTokens
          })
        )
      }
      const turn = view.turn + 1
      const requestedAt = nowOf(ctx)
      // Which model answers, and why, goes on the tape with each request; a model that fails before
      // sending anything hands the call to the next candidate, with a request of its own.
      const { models, plan } = route(agent, tokensUsed)
      const attempt = (n: number, routing: typeof plan): Effect.Effect<Answer, PalyraError> => {
        const model = models[n]!
        // Staged, not appended: it commits with the model's first delta or its answer (one append
        // fewer per model call); a failover stages the next request behind it.
        stage(ctx, [
          {
            _tag: "ModelRequest",
            ...base(ctx),
            at: nowOf(ctx),
            turn,
            model: model.name,
            messages: request.messages.length,
            estimatedTokens,
            tools: request.tools.map((t) => t.name),
            routing
          }
        ])
        const received = { count: 0 }
        const answer = Effect.catchAll(streamAnswer(ctx, model, request, turn, received), (error) => {
          if (received.count > 0 || n === models.length - 1) return Effect.fail(error)
          const why = isPalyraError(error) ? `${error.code}: ${error.message}` : "failed"
          return Effect.zipRight(
            Effect.logWarning(`model ${model.name} failed before answering; failing over`, error),
            Effect.suspend(() =>
              attempt(n + 1, {
                ...plan,
                attempt: n + 1,
                reason: `${model.name} failed before answering (${why}); failing over. ${plan.reason}`
              })
            )
          )
        })
        return ctx.tracing
          ? Effect.zipRight(Effect.annotateCurrentSpan({ turn, model: model.name, agent: agent.id }), answer)
          : answer
      }
      return Effect.flatMap(attempt(0, plan), (answer) => answered(ctx, turn, requestedAt, answer))
    })
  })
}

/** What a model call answered, written: with the run's `Done` when it is final, else staged. */
const answered = (
  ctx: RunContext,
  turn: number,
  requestedAt: number,
  answer: Answer
): Effect.Effect<void, PalyraError> => {
  const at = nowOf(ctx)
  const events: Array<NewTapeEvent> = [
    { _tag: "AssistantMessage", ...base(ctx), at, turn, text: answer.text, finishReason: answer.finishReason }
  ]
  if (answer.tail.length > 0) events.unshift({ _tag: "AssistantDelta", ...base(ctx), at, turn, text: answer.tail })
  const { inputTokens, outputTokens } = answer
  const finish = (): Effect.Effect<void, PalyraError> => {
    if (inputTokens + outputTokens > 0) {
      events.push({ _tag: "Usage", ...base(ctx), at, turn, inputTokens, outputTokens })
    }
    Metrics.unsafeRecord.modelTurn(at - requestedAt, ctx.metricLabels)
    // An answer that proposes no call is the final one: its last delta, message and usage commit with
    // the run's `Done` in one append (what `Complete` would write next), so a plain turn ends in one commit.
    if (answer.proposed.length === 0) {
      return transition(ctx, "Complete", "final answer", events, { addTokens: inputTokens + outputTokens })
    }
    // It commits with its first call's decision (and that call's start, when allowed).
    stage(ctx, events, inputTokens + outputTokens)
    return Effect.void
  }
  // Each proposal gets its id (an Effect: the clock and `Random`), one after the other.
  const propose = (i: number): Effect.Effect<void, PalyraError> => {
    if (i === answer.proposed.length) return finish()
    const p = answer.proposed[i]!
    return Effect.flatMap(makeToolCallId, (toolCallId) => {
      events.push({
        _tag: "ToolProposed",
        ...base(ctx),
        at,
        toolCallId,
        providerCallId: p.providerId,
        tool: p.name,
        args: p.args ?? {},
        argsDigest: digest({ tool: p.name, args: p.args ?? {} })
      })
      return propose(i + 1)
    })
  }
  return propose(0)
}

// ---- ending -----------------------------------------------------------------------------------

const fail = (ctx: RunContext, error: PalyraError | Error) =>
  Effect.gen(function* () {
    if (isTerminal(ctx.view.state)) return
    const code = isPalyraError(error) ? error.code : "internal"
    // Bounded (a defect's message is its whole cause): the failure's own events must fit the journal.
    const message = error.message.length > 4096 ? `${error.message.slice(0, 4096)}…` : error.message
    yield* Effect.logWarning("run failed", { runId: ctx.run.id, code, message })
    const closing = yield* closeOpenWork(
      ctx.deps.journal,
      base(ctx),
      ctx.view,
      "interrupted",
      `the run failed (${code})`
    )
    const runError: NewTapeEvent = { _tag: "RunError", ...base(ctx), at: nowOf(ctx), code, message }
    const failWith = (closed: ReadonlyArray<NewTapeEvent>, effects: Omit<AppendEffects, "runTransition"> = {}) =>
      transition(ctx, "Fail", `${code}: ${message}`, [...closed, runError], effects, { code, message })
    // What a failed write put back goes first. Should the journal refuse it again as too large (an
    // event of its own over the limit — a model's tool call with huge arguments), the run's failure
    // is still recorded, without those events — and without the results of their calls — but with
    // their tokens (the model turn was paid for). Any other refusal (a busy or full disk) is not
    // a reason to drop a valid turn: it fails as before.
    yield* ctx.staged.length === 0
      ? failWith(closing)
      : Effect.catchIf(
          failWith(closing),
          (refused) => refused._tag === "PayloadTooLarge",
          (refused) =>
            Effect.zipRight(
              Effect.logWarning("staged events dropped: the journal refused them as too large", {
                runId: ctx.run.id,
                what: refused.what
              }),
              Effect.suspend(() => {
                const dropped = new Set<string>()
                // Results only for the calls whose proposals go: a call proposed earlier keeps its
                // (interrupted) result, so it is not left open on the tape.
                for (const e of ctx.staged) if (e._tag === "ToolProposed") dropped.add(e.toolCallId)
                const tokens = ctx.stagedTokens
                ctx.staged = []
                ctx.stagedTokens = 0
                return failWith(
                  closing.filter((e) => !(e._tag === "ToolResult" && dropped.has(e.toolCallId))),
                  tokens === 0 ? {} : { addTokens: tokens }
                )
              })
            )
        )
  })

const cancelled = (ctx: RunContext, by: string) =>
  Effect.gen(function* () {
    const fresh = yield* requireRun(ctx.deps.journal, ctx.run.id)
    if (isTerminal(fresh.state)) return
    ctx.view.state = fresh.state
    const closing = yield* closeOpenWork(ctx.deps.journal, base(ctx), ctx.view, "cancelled", `run cancelled by ${by}`)
    yield* transition(ctx, "Cancel", `cancelled by ${by}`, closing)
  })

/** Write what is staged, if anything (a run parked at shutdown). */
const parkStaged = (ctx: RunContext): Effect.Effect<void, PalyraError> =>
  ctx.staged.length === 0 ? Effect.void : Effect.suspend(() => emit(ctx, [] as unknown as Events))

// ---- the loop ---------------------------------------------------------------------------------

/**
 * Drive one run from wherever its tape says it is: a fresh run, a run that was waiting for an
 * approval when the process stopped, or (when asked) one that was in progress. The tape is the
 * state (`RunView`); each step asks `RunView.next` what to do.
 * @internal
 */
export const runLoop = (
  deps: LoopDeps,
  runId: RunId,
  cancelledBy: () => string | undefined,
  parent?: Tracer.AnySpan | undefined,
  /** The run as its admission wrote it when it committed the run's start too (not read again). */
  admitted?: Run | undefined
) =>
  Effect.gen(function* () {
    const run = admitted ?? (yield* requireRun(deps.journal, runId))
    if (isTerminal(run.state)) return
    // The session is read here even when admission handed it over: a reset (or another change to
    // its history) may have committed between admission's read and the run's start commit.
    // The head first: the record read after it counts every token committed up to it (see `tokens`).
    const countedAt = yield* deps.journal.headSeq(run.sessionId)
    const session = yield* requireSession(deps.journal, run.sessionId)
    const history = yield* deps.history?.load(session) ?? loadHistory(deps.journal, session)
    const agent = deps.agents.get(session.agentId)
    // The run's clock, tracer and metric labels, read from its fiber in one step.
    const { clock, metricLabels, tracer } = yield* Effect.withFiberRuntime<{
      readonly clock: Clock.Clock
      readonly tracer: Tracer.Tracer
      readonly metricLabels: ReadonlyArray<MetricLabel.MetricLabel>
    }>((fiber) =>
      Effect.succeed({
        clock: Context.get(fiber.currentDefaultServices, Clock.Clock),
        tracer: fiber.currentTracer,
        metricLabels: fiber.getFiberRef(FiberRef.currentMetricLabels)
      })
    )
    const loaded = history.length
    const ctx: RunContext = {
      deps,
      agent: Option.getOrElse(agent, () => deps.agents.list[0]!),
      run,
      session,
      history,
      view: RunView.fold(runId, fromSeq(history, run.startSeq), run.state),
      staged: [],
      stagedTokens: 0,
      clock,
      tracing: isTracing(tracer),
      metricLabels,
      tokens: { used: session.tokensUsed, seq: countedAt }
    }
    if (Option.isNone(agent)) {
      // The session's agent was removed from the configuration: nothing may answer in its name.
      yield* fail(ctx, new Conflict({ message: `agent ${session.agentId} is not configured` }))
      return ended(ctx, loaded)
    }

    const body = Effect.gen(function* () {
      while (true) {
        const next = RunView.next(ctx.view)
        switch (next._tag) {
          case "Start": {
            const start = Effect.suspend(() =>
              transition(ctx, "Start", "run started", [
                {
                  _tag: "UserMessage",
                  ...base(ctx),
                  at: nowOf(ctx),
                  text: run.input,
                  ...acceptedWith(ctx.history, runId)
                }
              ])
            )
            yield* deps.startGate === undefined ? start : deps.startGate(start)
            break
          }
          case "Call":
            yield* toolCall(ctx, next.call)
            break
          case "ModelTurn":
            yield* modelTurn(ctx)
            break
          case "Complete":
            yield* transition(ctx, "Complete", "final answer")
            break
          case "Finished":
            return
        }
      }
    })

    const startedAt = nowOf(ctx)
    // The run's duration is recorded when its body ends, by the budget timer's finalizer (one
    // `ensuring` for both).
    const budget = budgetTimer(ctx, () => Metrics.unsafeRecord.runDuration(nowOf(ctx) - startedAt, ctx.metricLabels))
    yield* body.pipe(
      budget.within,
      Effect.catchAllCause((cause) => {
        if (Cause.isInterruptedOnly(cause)) return Effect.failCause(cause)
        const failure = Cause.failureOption(cause)
        const error = Option.isSome(failure) ? failure.value : new Error(Cause.pretty(cause))
        return fail(ctx, error as PalyraError | Error).pipe(
          Effect.catchAllCause((c) => Effect.logError("could not record run failure", c))
        )
      }),
      Effect.onInterrupt(() => {
        const by = cancelledBy()
        if (by === undefined && budget.expired()) {
          return fail(ctx, wallClockExceeded(ctx)).pipe(
            Effect.catchAllCause((c) => Effect.logError("could not record run failure", c))
          )
        }
        return by === undefined
          ? // shutdown: park the run where it is (what is staged is written first, so the tape has
            // it as if it had its own append); the next start resumes or marks it
            parkStaged(ctx).pipe(Effect.catchAllCause((c) => Effect.logError("could not record a staged event", c)))
          : cancelled(ctx, by).pipe(Effect.catchAllCause((c) => Effect.logError("could not record cancellation", c)))
      })
    )
    return ended(ctx, loaded)
  }).pipe(
    // Cancelled in its prologue (before its body could record anything): the cancellation is
    // recorded here, in the run's own fiber, so the run is terminal before the scheduler ends it
    // (its waiters and hooks) and before the session's next run starts.
    Effect.onInterrupt(() => cancelledInPrologue(deps, runId, cancelledBy)),
    Effect.catchAllCause((cause) =>
      Cause.isInterruptedOnly(cause) ? Effect.failCause(cause) : Effect.logError("run loop could not start", cause)
    ),
    Effect.annotateLogs({ runId }),
    traced("AgentLoop.run", {
      attributes: { runId },
      captureStackTrace: false,
      ...(parent === undefined ? { root: true } : { parent })
    })
  )

const cancelledInPrologue = (deps: LoopDeps, runId: RunId, cancelledBy: () => string | undefined) =>
  Effect.suspend(() => {
    const by = cancelledBy()
    return by === undefined ? Effect.void : cancelOutsideLoop(deps.journal, deps.tape, runId, by)
  }).pipe(Effect.catchAllCause((c) => Effect.logError("could not record cancellation", c)))

const wallClockExceeded = (ctx: RunContext) => {
  const limit = Duration.toMillis(ctx.agent.budgets.wallClock)
  return new BudgetExceeded({ budget: "wallClock", limit, used: limit })
}

/** The default services' clock (one per process): its `sleep` is a `setTimeout`. */
const liveClock = Effect.runSync(Effect.clock)
/** The longest delay `setTimeout` takes (Effect's live clock never fires a longer sleep). */
const MAX_TIMER_MILLIS = 2 ** 31 - 1

/**
 * The run's wall-clock budget as one timer — on the live clock a `setTimeout`, on any other (a
 * `TestClock`) a fiber sleeping on it — that, when the budget runs out, marks the run expired and
 * interrupts the run's own fiber; the run's `onInterrupt` then records the `wallClock` failure
 * instead of parking or cancelling. Its finalizer also records the run's duration (`ended`). `Effect.timeoutFail` raced two forked fibers (the run's body moved into one of
 * them, with a copy of the run fiber's refs); the body now runs in the run's fiber and the timer is
 * interrupted (not awaited) when it ends. Interruption lands where it did: after the write in
 * progress (`emit` is uninterruptible), or inside an await (the model's stream, a tool, an approval).
 */
const budgetTimer = (ctx: RunContext, ended: () => void) => {
  let expired = false
  const within = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.withFiberRuntime<A, E, R>((run) => {
      const expire = () => {
        expired = true
        run.unsafeInterruptAsFork(run.id())
      }
      let stop: () => void
      if (ctx.clock === liveClock) {
        // The live clock's `sleep` is a `setTimeout` (none past the timer's range: it never fires),
        // so on that clock the timer is one directly, not a fiber per run sleeping on it.
        const millis = Duration.toMillis(ctx.agent.budgets.wallClock)
        const handle = millis > MAX_TIMER_MILLIS ? undefined : setTimeout(expire, millis)
        stop = () => clearTimeout(handle)
      } else {
        const timer = Effect.runFork(
          Effect.flatMap(ctx.clock.sleep(ctx.agent.budgets.wallClock), () => Effect.sync(expire))
        )
        stop = () => timer.unsafeInterruptAsFork(run.id())
      }
      return Effect.ensuring(
        self,
        Effect.sync(() => {
          stop()
          ended()
        })
      )
    })
  return { within, expired: () => expired }
}

/**
 * A run's end, as the loop holds it: what it committed goes back to the history cache (so the
 * session's next run need not read it again), and the run's own events are answered for the
 * after-run hooks (`RunHooks.RunEnd.events`: they decide without reading the tape back). `loaded`
 * is how much of `ctx.history` was read at the run's start; the rest is what the run committed,
 * in commit order.
 */
const ended = (ctx: RunContext, loaded: number): ReadonlyArray<TapeEvent> => {
  const { history, run } = ctx
  ctx.deps.history?.committed(ctx.session, history, loaded)
  let i = history.length
  while (i > 0 && history[i - 1]!.tapeSeq >= run.startSeq) i--
  const out: Array<TapeEvent> = []
  for (; i < history.length; i++) if (history[i]!.runId === run.id) out.push(history[i]!)
  return out
}

/**
 * The tail of a history from `seq` on: what a run's view is folded from (its events all have a
 * `tapeSeq` from its `startSeq`), without walking the session's whole history. (A branch's
 * inherited events may slip in when the run is the branch's first; other runs' events fold to nothing.)
 */
const fromSeq = (history: ReadonlyArray<TapeEvent>, seq: number): ReadonlyArray<TapeEvent> => {
  let i = history.length
  while (i > 0 && history[i - 1]!.tapeSeq >= seq) i--
  return i === 0 ? history : history.slice(i)
}

/** Events that make up a session's prompt history: its parent's (for branches) then its own. @internal */
export const loadHistory = (journal: JournalService, session: Session): Effect.Effect<Array<TapeEvent>, PalyraError> =>
  Effect.gen(function* () {
    const out: Array<TapeEvent> = []
    if (session.parentId !== null) {
      const parent = yield* requireSession(journal, session.parentId)
      const inherited = yield* loadHistory(journal, parent)
      for (const e of inherited) if (session.parentSeq === null || e.tapeSeq <= session.parentSeq) out.push(e)
    }
    const own = yield* journal.readTape(session.id, { afterSeq: session.historyFromSeq })
    for (const e of own) out.push(e)
    return out
  })
