import { Cause, Clock, Duration, Effect, Option } from "effect"
import type { NonEmptyReadonlyArray } from "effect/Array"
import { digest } from "../../domain/Canonical.js"
import { BudgetExceeded, isPalyraError, type PalyraError } from "../../domain/Errors.js"
import { type ApprovalId, makeApprovalId, makeToolCallId, type RunId, type ToolCallId } from "../../domain/Ids.js"
import { type ApprovalRecord, makeApproval, type Run, type Session } from "../../domain/Records.js"
import { isTerminal, transition as nextState, type RunState, type Transition } from "../../domain/RunState.js"
import type { NewTapeEvent, TapeEvent, TapeEventOf } from "../../domain/TapeEvent.js"
import { type AppendEffects, type Service as JournalService, requireRun, requireSession } from "../../ports/Journal.js"
import { estimateTokens, type Service as ModelService, runInto } from "../../ports/ModelProvider.js"
import type { Decision, Service as PolicyService } from "../../ports/PolicyEngine.js"
import type { AnyTool, Service as ToolService } from "../../ports/Tool.js"
import type { Service as ApprovalsService } from "../Approvals.js"
import { buildMessages } from "./history.js"
import type { Tape } from "./tape.js"

/** Limits that end a run before it can burn time or money silently. @internal */
export interface ResolvedBudgets {
  readonly maxModelTurns: number
  readonly maxToolCalls: number
  readonly maxEventsPerTurn: number
  readonly wallClock: Duration.Duration
  readonly maxTokensPerRun: number
  readonly maxTokensPerSession: number
}

/** @internal */
export interface LoopDeps {
  readonly journal: JournalService
  readonly tape: Tape
  readonly model: ModelService
  readonly tools: ToolService
  readonly policy: PolicyService
  readonly approvals: ApprovalsService
  readonly instructions: string | undefined
  readonly budgets: ResolvedBudgets
  readonly approvalTimeout: Duration.Duration
  readonly requireApprovalChannel: boolean
  readonly coalesceChars: number
  readonly coalesceMillis: number
  readonly hasApprover: (sessionId: Session["id"]) => boolean
  readonly onApprovalRequested: (record: ApprovalRecord) => Effect.Effect<unknown>
  /** Reload standing grants into the policy engine (after one was used up or went stale). */
  readonly onGrantsChanged: Effect.Effect<void>
}

type CallView = {
  readonly proposed: TapeEventOf<"ToolProposed">
  decided?: TapeEventOf<"PolicyDecided">
  requested?: TapeEventOf<"ApprovalRequested">
  resolved?: TapeEventOf<"ApprovalResolved">
  started?: TapeEventOf<"ToolStarted">
  result?: TapeEventOf<"ToolResult">
}

const now = Clock.currentTimeMillis

/**
 * Drive one run from wherever its tape says it is: a fresh run, a run that was waiting for an
 * approval when the process stopped, or (when asked) one that was in progress. The tape is the
 * state; nothing else is needed to resume.
 * @internal
 */
export const runLoop = (deps: LoopDeps, runId: RunId, cancelRequested: () => string | undefined) =>
  Effect.gen(function* () {
    const { journal, tape } = deps
    const run0 = yield* requireRun(journal, runId)
    if (isTerminal(run0.state)) return
    const session = yield* requireSession(journal, run0.sessionId)
    const history = yield* loadHistory(journal, session)

    let state: RunState = run0.state
    let turn = 0
    let toolCallsStarted = 0
    let runTokens = 0
    const calls = new Map<ToolCallId, CallView>()
    const callOrder: Array<ToolCallId> = []

    const observe = (e: TapeEvent) => {
      history.push(e)
      if (e.runId !== runId) return
      switch (e._tag) {
        case "ModelRequest":
          turn = Math.max(turn, e.turn)
          break
        case "Usage":
          runTokens += e.inputTokens + e.outputTokens
          break
        case "ToolProposed":
          calls.set(e.toolCallId, { proposed: e })
          callOrder.push(e.toolCallId)
          break
        case "PolicyDecided":
        case "ApprovalRequested":
        case "ApprovalResolved":
        case "ToolStarted":
        case "ToolResult": {
          const view = calls.get(e.toolCallId)
          if (view === undefined) break
          if (e._tag === "PolicyDecided") view.decided = e
          else if (e._tag === "ApprovalRequested") view.requested = e
          else if (e._tag === "ApprovalResolved") view.resolved = e
          else if (e._tag === "ToolStarted") {
            view.started = e
            toolCallsStarted++
          } else view.result = e
          break
        }
        case "RunStateChanged":
          state = e.to
          break
        default:
          break
      }
    }
    // Rebuild counters from what this run already wrote (resume after restart).
    const existing = history.splice(0)
    for (const e of existing) observe(e)

    const base = () => ({ sessionId: session.id, runId })
    const emit = (events: NonEmptyReadonlyArray<NewTapeEvent>, effects?: AppendEffects) =>
      tape.append(session.id, events, effects).pipe(
        Effect.tap((stored) => Effect.sync(() => stored.forEach(observe))),
        Effect.asVoid
      )
    const move = (event: Transition, reason: string, extra: ReadonlyArray<NewTapeEvent> = [], effects = {}) =>
      Effect.gen(function* () {
        const from = state
        const to = yield* nextState(from, event)
        const at = yield* now
        const changed: NewTapeEvent = { _tag: "RunStateChanged", ...base(), at, from, to, reason }
        yield* emit([...extra, changed] as unknown as NonEmptyReadonlyArray<NewTapeEvent>, {
          ...effects,
          runTransition: { runId, from, to }
        })
      })

    // ---- tool calls -------------------------------------------------------------------------
    const result = (
      call: CallView,
      status: TapeEventOf<"ToolResult">["status"],
      output: string,
      durationMs = 0,
      truncated = false
    ) =>
      Effect.flatMap(now, (at) =>
        emit([
          {
            _tag: "ToolResult",
            ...base(),
            at,
            toolCallId: call.proposed.toolCallId,
            tool: call.proposed.tool,
            status,
            output,
            truncated,
            durationMs
          }
        ])
      )

    const execute = (call: CallView, tool: AnyTool, prefix: ReadonlyArray<NewTapeEvent> = []) =>
      Effect.gen(function* () {
        if (toolCallsStarted >= deps.budgets.maxToolCalls) {
          return yield* new BudgetExceeded({
            budget: "maxToolCalls",
            limit: deps.budgets.maxToolCalls,
            used: toolCallsStarted
          })
        }
        const attempt = (call.started?.attempt ?? 0) + 1
        const startedAt = yield* now
        const started: NewTapeEvent = {
          _tag: "ToolStarted",
          ...base(),
          at: startedAt,
          toolCallId: call.proposed.toolCallId,
          tool: tool.name,
          attempt
        }
        yield* emit([...prefix, started] as unknown as NonEmptyReadonlyArray<NewTapeEvent>)
        const outcome = yield* deps.tools
          .execute(tool, call.proposed.args, {
            sessionId: session.id,
            runId,
            toolCallId: call.proposed.toolCallId,
            principal: run0.principal,
            note: (text) =>
              Effect.flatMap(now, (at) =>
                emit([{ _tag: "SessionNote", ...base(), at, author: `tool:${tool.name}`, text }])
              ).pipe(Effect.orDie)
          })
          .pipe(Effect.either)
        const durationMs = (yield* now) - startedAt
        if (outcome._tag === "Right") {
          yield* result(call, "ok", outcome.right.output, durationMs, outcome.right.truncated)
        } else {
          yield* result(call, "error", `${outcome.left.reason}: ${outcome.left.message}`, durationMs)
        }
      })

    const awaitApproval = (call: CallView, approvalId: ApprovalId) =>
      Effect.gen(function* () {
        const record = yield* deps.approvals.await(approvalId)
        const at = yield* now
        const decision = record.status === "approved" ? "approved" : record.status === "denied" ? "denied" : "expired"
        const resolved: NewTapeEvent = {
          _tag: "ApprovalResolved",
          ...base(),
          at,
          approvalId,
          toolCallId: call.proposed.toolCallId,
          decision,
          scope: record.scope,
          by: record.resolver ?? "system",
          reason: record.reason ?? decision
        }
        if (state === "WaitingForApproval") yield* move("ApprovalResolved", `approval ${decision}`, [resolved])
        else yield* emit([resolved])
        return record
      })

    const requestApproval = (call: CallView, tool: AnyTool) =>
      Effect.gen(function* () {
        const grant = yield* deps.approvals.findGrant({
          sessionId: session.id,
          principal: run0.principal,
          tool: tool.name,
          argsDigest: call.proposed.argsDigest
        })
        const at = yield* now
        const usable = Option.isSome(grant)
          ? yield* deps.journal.useGrant(grant.value.id, at).pipe(Effect.option)
          : Option.none<ApprovalRecord>()
        if (Option.isSome(grant) && Option.isSome(usable)) {
          const { extra, exhausted } = grantUse(usable.value, at)
          yield* emit([
            ...extra,
            {
              _tag: "ApprovalResolved",
              ...base(),
              at,
              approvalId: grant.value.id,
              toolCallId: call.proposed.toolCallId,
              decision: "approved",
              scope: grant.value.scope,
              by: `grant:${grant.value.id}`,
              reason: `covered by an earlier ${grant.value.scope}-scope approval`
            }
          ] as unknown as NonEmptyReadonlyArray<NewTapeEvent>)
          if (exhausted) yield* deps.onGrantsChanged
          return "approved" as const
        }
        const approvalId = yield* makeApprovalId
        const expiresAt = at + Duration.toMillis(deps.approvalTimeout)
        const summary = `${tool.name} ${JSON.stringify(call.proposed.args).slice(0, 300)}`
        const record = makeApproval({
          id: approvalId,
          sessionId: session.id,
          runId,
          toolCallId: call.proposed.toolCallId,
          principal: run0.principal,
          tool: tool.name,
          argsDigest: call.proposed.argsDigest,
          risk: tool.risk,
          summary,
          requestedAt: at,
          expiresAt
        })
        const requested: NewTapeEvent = {
          _tag: "ApprovalRequested",
          ...base(),
          at,
          approvalId,
          toolCallId: call.proposed.toolCallId,
          tool: tool.name,
          risk: tool.risk,
          argsDigest: call.proposed.argsDigest,
          summary,
          expiresAt
        }
        if (deps.requireApprovalChannel && !deps.hasApprover(session.id)) {
          // Fail closed: nobody can answer now. The pending record stays for an operator to grant.
          yield* emit([requested], { createApproval: record })
          yield* result(call, "denied", "approval required, but no approval channel is connected for this session")
          return "no-channel" as const
        }
        yield* move("AwaitApproval", `waiting for approval ${approvalId}`, [requested], { createApproval: record })
        yield* deps.onApprovalRequested(record)
        const final = yield* awaitApproval(call, approvalId)
        return final.status === "approved" ? ("approved" as const) : ("denied" as const)
      })

    /** Ask the policy engine; when a standing grant allowed the call, count the use (compare-and-set). */
    const decide = (
      call: CallView,
      tool: AnyTool,
      retried: boolean
    ): Effect.Effect<{ decision: Decision; extra: Array<NewTapeEvent>; exhausted: boolean }, PalyraError> =>
      Effect.gen(function* () {
        const decision = yield* deps.policy.decide({
          principal: run0.principal,
          sessionId: session.id,
          channel: session.channel,
          tool: { name: tool.name, risk: tool.risk, category: tool.category, sandbox: tool.sandbox },
          args: call.proposed.args,
          argsDigest: call.proposed.argsDigest
        })
        const grantId =
          decision.decision === "allow" ? decision.policyIds.find((id) => id.startsWith("grant:")) : undefined
        if (grantId === undefined) return { decision, extra: [], exhausted: false }
        const at = yield* now
        const used = yield* deps.journal.useGrant(grantId.slice("grant:".length) as ApprovalId, at).pipe(Effect.either)
        if (used._tag === "Left") {
          // Revoked, expired or used up since the engine last heard: refresh and decide again.
          yield* deps.onGrantsChanged
          if (!retried) return yield* decide(call, tool, true)
          return {
            decision: { decision: "deny" as const, policyIds: [grantId], reasons: ["the grant no longer applies"] },
            extra: [],
            exhausted: false
          }
        }
        return { decision, ...grantUse(used.right, at) }
      })

    const grantUse = (g: ApprovalRecord, at: number) => {
      const exhausted = g.grantMaxUses !== null && g.grantUses >= g.grantMaxUses
      const event = (change: "used" | "exhausted"): NewTapeEvent => ({
        _tag: "GrantChanged",
        ...base(),
        at,
        approvalId: g.id,
        tool: g.tool,
        change,
        by: run0.principal,
        uses: g.grantUses,
        maxUses: g.grantMaxUses,
        expiresAt: g.grantExpiresAt
      })
      return { extra: exhausted ? [event("used"), event("exhausted")] : [event("used")], exhausted }
    }

    const processCall = (call: CallView) =>
      Effect.gen(function* () {
        if (call.result) return
        const tool = deps.tools.get(call.proposed.tool)
        if (Option.isNone(tool)) {
          return yield* result(call, "error", `unknown tool: ${call.proposed.tool}`)
        }
        if (call.started) {
          // Started before the process stopped, with no result: never re-run blindly.
          if (tool.value.idempotency === "idempotent") return yield* execute(call, tool.value)
          return yield* result(
            call,
            "interrupted",
            "interrupted: the process stopped during this call; outcome unknown"
          )
        }
        let decided = call.decided
        if (decided === undefined) {
          const { decision, extra, exhausted } = yield* decide(call, tool.value, false)
          const decidedEvent: NewTapeEvent = {
            _tag: "PolicyDecided",
            ...base(),
            at: yield* now,
            toolCallId: call.proposed.toolCallId,
            tool: tool.value.name,
            decision: decision.decision,
            policyIds: [...decision.policyIds],
            reasons: [...decision.reasons]
          }
          // An allowed call's decision (and any grant use) and its start commit together, before the tool runs.
          if (decision.decision === "allow") {
            yield* execute(call, tool.value, [decidedEvent, ...extra])
            if (exhausted) yield* deps.onGrantsChanged
            return
          }
          yield* emit([decidedEvent])
          decided = call.decided!
        }
        if (decided.decision === "deny") {
          return yield* result(call, "denied", `denied by policy: ${decided.reasons.join("; ")}`)
        }
        if (decided.decision === "allow") return yield* execute(call, tool.value)
        // require_approval
        let outcome: "approved" | "denied" | "no-channel"
        if (call.resolved) outcome = call.resolved.decision === "approved" ? "approved" : "denied"
        else if (call.requested) {
          // Resumed while waiting: announce the pending approval again to whoever watches now.
          const pending = yield* deps.approvals.get(call.requested.approvalId)
          if (Option.isSome(pending) && pending.value.status === "pending")
            yield* deps.onApprovalRequested(pending.value)
          const record = yield* awaitApproval(call, call.requested.approvalId)
          outcome = record.status === "approved" ? "approved" : "denied"
        } else outcome = yield* requestApproval(call, tool.value)
        if (outcome === "approved") return yield* execute(call, tool.value)
        if (outcome === "denied") {
          const why = call.resolved ? `${call.resolved.decision}: ${call.resolved.reason}` : "not approved"
          return yield* result(call, "denied", `approval ${why}`)
        }
      })

    const processPendingCalls = Effect.suspend(() =>
      Effect.forEach(
        callOrder.map((id) => calls.get(id)!).filter((c) => c.result === undefined),
        processCall,
        { discard: true }
      )
    )

    // ---- model turns ------------------------------------------------------------------------
    const modelTurn = Effect.gen(function* () {
      const b = deps.budgets
      if (turn >= b.maxModelTurns) {
        return yield* new BudgetExceeded({ budget: "maxModelTurns", limit: b.maxModelTurns, used: turn })
      }
      const request = {
        instructions: deps.instructions,
        messages: buildMessages(history),
        tools: deps.tools.specs
      }
      const estimate = estimateTokens(request)
      if (runTokens + estimate > b.maxTokensPerRun) {
        return yield* new BudgetExceeded({
          budget: "maxTokensPerRun",
          limit: b.maxTokensPerRun,
          used: runTokens + estimate
        })
      }
      const current = yield* requireSession(journal, session.id)
      if (current.tokensUsed + estimate > b.maxTokensPerSession) {
        return yield* new BudgetExceeded({
          budget: "maxTokensPerSession",
          limit: b.maxTokensPerSession,
          used: current.tokensUsed + estimate
        })
      }
      const thisTurn = turn + 1
      yield* emit([
        {
          _tag: "ModelRequest",
          ...base(),
          at: yield* now,
          turn: thisTurn,
          model: deps.model.name,
          messages: request.messages.length,
          estimatedTokens: estimate,
          tools: request.tools.map((t) => t.name)
        }
      ])

      let text = ""
      let buffer = ""
      let bufferSince = 0
      let eventsThisTurn = 0
      let finishReason = "stop"
      let inputTokens = 0
      let outputTokens = 0
      const proposed: Array<{ providerId: string; name: string; args: unknown }> = []
      const countEvent = Effect.suspend(() =>
        ++eventsThisTurn > b.maxEventsPerTurn
          ? Effect.fail(
              new BudgetExceeded({ budget: "maxEventsPerTurn", limit: b.maxEventsPerTurn, used: eventsThisTurn })
            )
          : Effect.void
      )
      const flush = Effect.gen(function* () {
        if (buffer.length === 0) return
        const chunk = buffer
        buffer = ""
        yield* countEvent
        yield* emit([{ _tag: "AssistantDelta", ...base(), at: yield* now, turn: thisTurn, text: chunk }])
      })
      yield* runInto(deps.model, request, (event) =>
        Effect.gen(function* () {
          switch (event.type) {
            case "text-delta": {
              const t = yield* now
              if (buffer.length === 0) bufferSince = t
              buffer += event.text
              text += event.text
              if (buffer.length >= deps.coalesceChars || t - bufferSince >= deps.coalesceMillis) yield* flush
              break
            }
            case "tool-call":
              yield* flush
              yield* countEvent
              proposed.push({ providerId: event.id, name: event.name, args: event.args })
              break
            case "usage":
              inputTokens += event.inputTokens
              outputTokens += event.outputTokens
              break
            case "finish":
              finishReason = event.reason
              break
          }
        })
      )
      yield* flush
      const at = yield* now
      const events: Array<NewTapeEvent> = [
        { _tag: "AssistantMessage", ...base(), at, turn: thisTurn, text, finishReason }
      ]
      for (const p of proposed) {
        events.push({
          _tag: "ToolProposed",
          ...base(),
          at,
          toolCallId: yield* makeToolCallId,
          providerCallId: p.providerId,
          tool: p.name,
          args: p.args ?? {},
          argsDigest: digest({ tool: p.name, args: p.args ?? {} })
        })
      }
      if (inputTokens + outputTokens > 0) {
        events.push({ _tag: "Usage", ...base(), at, turn: thisTurn, inputTokens, outputTokens })
      }
      yield* emit(events as unknown as NonEmptyReadonlyArray<NewTapeEvent>, {
        addTokens: inputTokens + outputTokens
      })
      return proposed.length
    })

    // ---- the loop ---------------------------------------------------------------------------
    const body = Effect.gen(function* () {
      if (state === "Accepted") {
        const at = yield* now
        yield* move("Start", "run started", [{ _tag: "UserMessage", ...base(), at, text: run0.input }])
      }
      while (true) {
        yield* processPendingCalls
        const proposedCount = yield* modelTurn
        if (proposedCount === 0) break
      }
      yield* move("Complete", "final answer")
    })

    const fail = (error: PalyraError | Error) =>
      Effect.gen(function* () {
        if (isTerminal(state)) return
        const code = isPalyraError(error) ? error.code : "internal"
        const message = error.message
        const at = yield* now
        yield* Effect.logWarning("run failed", { runId, code, message })
        yield* emit(
          [
            { _tag: "RunError", ...base(), at, code, message },
            { _tag: "RunStateChanged", ...base(), at, from: state, to: "Failed", reason: `${code}: ${message}` }
          ],
          { runTransition: { runId, from: state, to: "Failed", error: { code, message } } }
        )
      })

    const cancelled = (by: string) =>
      Effect.gen(function* () {
        const fresh = yield* requireRun(journal, runId)
        state = fresh.state
        if (isTerminal(state)) return
        const at = yield* now
        const pending = yield* journal.listApprovals({ runId, status: "pending" })
        for (const a of pending) {
          yield* journal
            .resolveApproval(a.id, {
              status: "denied",
              scope: "once",
              resolver: "system",
              reason: "run cancelled",
              resolvedAt: at
            })
            .pipe(Effect.ignore)
        }
        yield* emit(
          [{ _tag: "RunStateChanged", ...base(), at, from: state, to: "Cancelled", reason: `cancelled by ${by}` }],
          {
            runTransition: { runId, from: state, to: "Cancelled" }
          }
        )
      })

    yield* body.pipe(
      Effect.timeoutFail({
        duration: deps.budgets.wallClock,
        onTimeout: () =>
          new BudgetExceeded({
            budget: "wallClock",
            limit: Duration.toMillis(deps.budgets.wallClock),
            used: Duration.toMillis(deps.budgets.wallClock)
          })
      }),
      Effect.catchAllCause((cause) => {
        if (Cause.isInterruptedOnly(cause)) return Effect.failCause(cause)
        const failure = Cause.failureOption(cause)
        const error = Option.isSome(failure) ? failure.value : new Error(Cause.pretty(cause))
        return fail(error as PalyraError | Error).pipe(
          Effect.catchAllCause((c) => Effect.logError("could not record run failure", c))
        )
      }),
      Effect.onInterrupt(() => {
        const by = cancelRequested()
        return by === undefined
          ? Effect.void // shutdown: park the run where it is; the next start resumes or marks it
          : cancelled(by).pipe(Effect.catchAllCause((c) => Effect.logError("could not record cancellation", c)))
      })
    )
  }).pipe(
    Effect.catchAllCause((cause) =>
      Cause.isInterruptedOnly(cause) ? Effect.failCause(cause) : Effect.logError("run loop could not start", cause)
    ),
    Effect.annotateLogs({ runId }),
    Effect.withSpan("AgentLoop.run", { attributes: { runId }, captureStackTrace: false })
  )

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

/** @internal */
export type { Run }
