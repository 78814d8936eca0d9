/**
 * The `Gateway` is the one facade transports, channels and the Promise API call. It binds messages
 * to sessions, admits runs (one at a time per session; later messages queue in order), drives each
 * run with the agent loop, resolves approvals, cancels runs and streams tape events (replay from the
 * journal, then live).
 *
 * **Authorization lives here.** Every method takes the `Caller`; a caller sees and acts on what its
 * principal owns, operators on everything. What a caller may not see answers exactly like what does
 * not exist (`NotFound`), so ids cannot be probed. Transports only authenticate and translate.
 *
 * @since 0.1.0
 */
import { Cause, Clock, Context, Duration, Effect, Layer, Option, type Scope, Stream, type Tracer } from "effect"
import { type AgentInfo, DEFAULT_AGENT } from "../domain/Agent.js"
import * as Caller from "../domain/Caller.js"
import {
  Conflict,
  InvalidArgument,
  type InvalidTransition,
  type JournalError,
  NotFound,
  type PayloadTooLarge,
  PermissionDenied,
  type StreamLagged
} from "../domain/Errors.js"
import { type ApprovalId, makeRunId, makeSessionId, type RunId, type SessionId } from "../domain/Ids.js"
import {
  type ApprovalFilter,
  type ApprovalRecord,
  makeSession,
  type Run,
  type RunFilter,
  type Session
} from "../domain/Records.js"
import { CurrentRedactor } from "../domain/Redaction.js"
import { isTerminal } from "../domain/RunState.js"
import type { TapeEvent } from "../domain/TapeEvent.js"
import { BlobStore } from "../ports/BlobStore.js"
import {
  type CheckpointInfo,
  type Compaction,
  Compactor,
  type Service as CompactorService,
  type Restored
} from "../ports/Compactor.js"
import { traced } from "../ports/internal/traced.js"
import { Journal, requireRun, type VerifyResult } from "../ports/Journal.js"
import { LiveTape } from "../ports/LiveTape.js"
import { ModelProvider } from "../ports/ModelProvider.js"
import { PolicyEngine } from "../ports/PolicyEngine.js"
import { ToolRuntime } from "../ports/Tool.js"
import * as Agents from "./Agents.js"
import { Approvals } from "./Approvals.js"
import * as Attachments from "./Attachments.js"
import type { Follower } from "./Follower.js"
import { makeApprovers } from "./internal/approvers.js"
import { makeHistoryCache } from "./internal/historyCache.js"
import { loadHistory, runLoop } from "./internal/loop.js"
import { onScopeClose } from "./internal/onScopeClose.js"
import { recover } from "./internal/recovery.js"
import { makeScheduler } from "./internal/scheduler.js"
import { annotateSpan, currentSpanOrUndefined } from "./internal/spanOf.js"
import { makeStartGate, type StartGate } from "./internal/startGate.js"
import { recordAdmittedStart } from "./internal/startNow.js"
import { makeTape } from "./internal/tape.js"
import { cancelOutsideLoop, recordTransition } from "./internal/transition.js"
import { PromptAssembler } from "./PromptAssembler.js"

/** Budgets that end a run (see `Agents.Budgets`). @since 0.1.0 @category Models */
export type Budgets = Agents.Budgets

/** @since 0.1.0 @category Models */
export interface Options {
  /** System instructions of the default agent (see `Agents`). */
  readonly instructions?: string | undefined
  /** Budgets of the default agent, and of every agent that does not set its own. */
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
  /** Limits of message attachments, and whether the models accept images (see `Attachments`). */
  readonly attachments?: Attachments.Limits | undefined
  /**
   * Committed events a live subscriber may have waiting (its client not reading) before it is cut
   * off with `StreamLagged`, resumable after its last seq (default 4096).
   */
  readonly liveBufferEvents?: number | undefined
  /**
   * How many run starts (admissions and the runs' first transitions) run at full speed at once;
   * beyond that, start work takes at most this many steps per event-loop turn, so a burst of starts
   * cannot hold up the events of runs already streaming (default 4; `Infinity`: no gate).
   */
  readonly maxConcurrentStarts?: number | undefined
}

/**
 * Where a message or session goes: a session by id, or the caller's session with a key (created
 * when new), answered by an agent.
 *
 * @since 0.1.0
 * @category Models
 */
export interface SessionTarget {
  /** Reuse this session (it must be the caller's, unless the caller is an operator). */
  readonly sessionId?: SessionId | undefined
  /** Reuse the caller's session with this key, or create it. */
  readonly key?: string | undefined
  readonly channel?: string | undefined
  readonly title?: string | undefined
  /**
   * The agent that answers (an unknown one is `InvalidArgument`). A new session is bound to it; an
   * existing session keeps its own agent, and naming another is `Conflict`.
   */
  readonly agent?: string | undefined
  /**
   * Where the message came from inside `channel` (a chat platform's bot account and conversation):
   * when no `agent` is named, a new session gets the agent the bindings give this (channel,
   * account, conversation), else `default`. An existing session is never re-bound.
   */
  readonly account?: string | undefined
  readonly conversation?: string | undefined
}

/** @since 0.1.0 @category Models */
export interface MessageRequest extends SessionTarget {
  readonly text: string
  /** Images and text files that come with the message (see `Attachments`). */
  readonly attachments?: ReadonlyArray<Attachments.Input> | undefined
}

/** @since 0.1.0 @category Models */
export interface StartedRun {
  readonly session: Session
  readonly run: Run
  /** This run's events, from its admission to its end. */
  readonly events: Stream.Stream<TapeEvent, JournalError | StreamLagged>
  /** `events` as a plain `Follower`, open until the scope closes (for transports' hot paths). */
  readonly follow: Effect.Effect<Follower, never, Scope.Scope>
}

/** @since 0.1.0 @category Models */
export interface SubscribeOptions {
  /** Count this subscriber as an approval channel for the session while it is open. */
  readonly approver?: boolean | undefined
}

/** An approval decision as a caller gives it (the resolver is the caller). @since 0.1.0 @category Models */
export interface ApprovalDecision {
  readonly approvalId: ApprovalId
  readonly decision: "approve" | "deny"
  /** How far an approval reaches: this call only, the rest of the session, or always (a narrow grant). */
  readonly scope?: "once" | "session" | "always" | undefined
  readonly reason?: string | undefined
  /** For `session`/`always` grants: stop applying at this time (epoch ms). */
  readonly grantExpiresAt?: number | undefined
  /** For `session`/`always` grants: allow at most this many calls. */
  readonly grantMaxUses?: number | undefined
}

/** A standing grant, with the policy the engine evaluates for it (when the engine can show it). @since 0.1.0 @category Models */
export interface Grant extends ApprovalRecord {
  readonly policy: string | null
}

/** @since 0.1.0 @category Models */
export type GatewayError =
  | JournalError
  | NotFound
  | Conflict
  | PermissionDenied
  | InvalidArgument
  | PayloadTooLarge
  | InvalidTransition
  | StreamLagged

/** @since 0.1.0 @category Models */
export interface Service {
  /** The agents sessions can be bound to (what they are for, their tools and models), `default` first. */
  readonly listAgents: (caller: Caller.Caller) => Effect.Effect<ReadonlyArray<AgentInfo>>
  readonly resolveSession: (caller: Caller.Caller, target: SessionTarget) => Effect.Effect<Session, GatewayError>
  readonly getSession: (caller: Caller.Caller, sessionId: SessionId) => Effect.Effect<Session, GatewayError>
  /** The caller's sessions (every principal's for operators, narrowed by `principal` if given). */
  readonly listSessions: (
    caller: Caller.Caller,
    filter?: {
      readonly principal?: string | undefined
      readonly includeArchived?: boolean | undefined
      readonly limit?: number | undefined
    }
  ) => Effect.Effect<ReadonlyArray<Session>, GatewayError>
  /** Start a fresh prompt history; the old tape stays for audit. */
  readonly resetSession: (caller: Caller.Caller, sessionId: SessionId) => Effect.Effect<Session, GatewayError>
  /** A new session whose history starts as the parent's up to `atSeq` (default: all of it). */
  readonly branchSession: (
    caller: Caller.Caller,
    sessionId: SessionId,
    options?: { readonly atSeq?: number | undefined; readonly title?: string | undefined }
  ) => Effect.Effect<Session, GatewayError>
  readonly archiveSession: (caller: Caller.Caller, sessionId: SessionId) => Effect.Effect<Session, GatewayError>

  /** Admit a run and stream its events. The caller counts as an approval channel until the run ends. */
  readonly startRun: (caller: Caller.Caller, request: MessageRequest) => Effect.Effect<StartedRun, GatewayError>
  /**
   * `startRun` with the run's `follower` attached before its admission commits (once the caller
   * is authorized for the session), open until the scope closes: the run's first events reach it
   * by their publication instead of being read back from the journal. A refused or failed start
   * leaves nothing attached. With `session: true` the follower is the whole session's from the
   * run's first event on (it does not end with the run), for a stream that outlives it (RunStream).
   * `attached` is called with the follower (and the run being admitted) as soon as it is attached,
   * before the commit, so a transport can take the start commit's events inside their publication
   * instead of after this call returns; called again (with a new follower) if the admission is
   * retried. Until the call succeeds, the follower may also see another run's events of the session
   * and the start may still be refused: only events of `run` prove its start committed.
   */
  readonly startRunFollowing: (
    caller: Caller.Caller,
    request: MessageRequest,
    options?: {
      readonly session?: boolean | undefined
      readonly attached?: ((follower: Follower, run: Run) => void) | undefined
    }
  ) => Effect.Effect<StartedRun & { readonly follower: Follower }, GatewayError, Scope.Scope>
  /** Admit a run without streaming it. */
  readonly sendMessage: (
    caller: Caller.Caller,
    request: MessageRequest
  ) => Effect.Effect<{ readonly session: Session; readonly run: Run }, GatewayError>
  readonly cancelRun: (caller: Caller.Caller, runId: RunId) => Effect.Effect<Run, GatewayError>
  readonly getRun: (caller: Caller.Caller, runId: RunId) => Effect.Effect<Run, GatewayError>
  readonly listRuns: (caller: Caller.Caller, filter: RunFilter) => Effect.Effect<ReadonlyArray<Run>, GatewayError>
  /** Wait for a run to reach a terminal state. */
  readonly awaitRun: (caller: Caller.Caller, runId: RunId) => Effect.Effect<Run, GatewayError>

  readonly resolveApproval: (
    caller: Caller.Caller,
    decision: ApprovalDecision
  ) => Effect.Effect<ApprovalRecord, GatewayError>
  readonly getApproval: (caller: Caller.Caller, approvalId: ApprovalId) => Effect.Effect<ApprovalRecord, GatewayError>
  readonly listApprovals: (
    caller: Caller.Caller,
    filter: ApprovalFilter
  ) => Effect.Effect<ReadonlyArray<ApprovalRecord>, GatewayError>
  /** Standing grants (approvals with scope `session` or `always`), active or revoked. */
  readonly listGrants: (caller: Caller.Caller) => Effect.Effect<ReadonlyArray<Grant>, GatewayError>
  /** Revoke a standing grant; the change is on the tape and the policy engine forgets it at once. */
  readonly revokeGrant: (caller: Caller.Caller, approvalId: ApprovalId) => Effect.Effect<Grant, GatewayError>
  /**
   * Count the caller as an approval channel until the scope closes: for every session it may see
   * (an operator console: all of them), or — with `sessionId` — for that one session only (a chat
   * conversation). A session the caller may not see registers nothing.
   */
  readonly registerApprover: (caller: Caller.Caller, sessionId?: SessionId) => Effect.Effect<void, never, Scope.Scope>
  /**
   * Every approval the caller may answer that a run starts waiting for, from now on. While the
   * stream is consumed the caller counts as an approval channel.
   */
  readonly watchApprovals: (caller: Caller.Caller) => Stream.Stream<ApprovalRecord>
  /**
   * Like `watchApprovals`, and also every approval of the caller's that is resolved or expires
   * (the record's `status` tells which): what a console needs to keep an inbox current.
   */
  readonly watchApprovalChanges: (caller: Caller.Caller) => Stream.Stream<ApprovalRecord>
  /**
   * `watchApprovalChanges`, subscribed (and the caller counted as an approval channel) when the
   * effect completes rather than when the stream is first pulled: a transport can tell its client
   * "ready" after this and nothing from then on is missed. Ends with the scope.
   */
  readonly subscribeApprovalChanges: (
    caller: Caller.Caller
  ) => Effect.Effect<Stream.Stream<ApprovalRecord>, never, Scope.Scope>

  /** Replay the session's tape after `afterSeq`, then follow it live. */
  readonly subscribe: (
    caller: Caller.Caller,
    sessionId: SessionId,
    afterSeq: number,
    options?: SubscribeOptions
  ) => Stream.Stream<TapeEvent, GatewayError>
  /**
   * `subscribe` as a plain `Follower` (take/onReady callbacks, no Effect step per event), open until
   * the scope closes: for transports' streaming hot paths. Same authorization and events.
   */
  readonly follow: (
    caller: Caller.Caller,
    sessionId: SessionId,
    afterSeq: number,
    options?: SubscribeOptions
  ) => Effect.Effect<Follower, GatewayError, Scope.Scope>
  readonly readTape: (
    caller: Caller.Caller,
    sessionId: SessionId,
    options: { readonly afterSeq: number; readonly limit?: number | undefined }
  ) => Effect.Effect<ReadonlyArray<TapeEvent>, GatewayError>
  /**
   * Compact the session's history now (`preview`: compute the summary and token counts, append
   * nothing). Needs a context engine (`@palyra/core/context`) as the kernel's prompt assembler.
   */
  readonly compactSession: (
    caller: Caller.Caller,
    sessionId: SessionId,
    options?: { readonly preview?: boolean | undefined }
  ) => Effect.Effect<Compaction, GatewayError>
  /** The session's checkpoints (one per compaction), oldest first. */
  readonly listCheckpoints: (
    caller: Caller.Caller,
    sessionId: SessionId
  ) => Effect.Effect<ReadonlyArray<CheckpointInfo>, GatewayError>
  /** Put the session's prompt back as it was before a checkpoint's compaction (journaled; nothing is deleted). */
  readonly restoreCheckpoint: (
    caller: Caller.Caller,
    sessionId: SessionId,
    checkpointId: string
  ) => Effect.Effect<Restored, GatewayError>
  /** Recompute the journal's tamper-evidence chain (operators only). */
  readonly verifyJournal: (caller: Caller.Caller) => Effect.Effect<VerifyResult, GatewayError>
}

/** @since 0.1.0 @category Tags */
export class Gateway extends Context.Tag("@palyra/core/Gateway")<Gateway, Service>() {}

/** What the caller may not see answers like what does not exist. */
const visible = <A extends { readonly principal: string }>(
  caller: Caller.Caller,
  entity: string,
  id: string,
  found: Option.Option<A>
): Effect.Effect<A, NotFound> =>
  Option.isSome(found) && Caller.owns(caller, found.value.principal)
    ? Effect.succeed(found.value)
    : Effect.fail(new NotFound({ entity, id }))

/**
 * Build a Gateway. Runs live in the returned scope: closing it parks them (their state stays on the
 * tape) so a later Gateway over the same journal picks them up. Its agents are the context's
 * `AgentRegistry` when there is one (`Kernel.layer` provides it), else just the default agent: the
 * context's model and tools with `options.instructions` and `options.budgets`.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = (
  options: Options = {}
): Effect.Effect<
  Service,
  JournalError | InvalidArgument,
  Journal | ModelProvider | ToolRuntime | PolicyEngine | Approvals | PromptAssembler | Scope.Scope
> =>
  Effect.gen(function* () {
    const journal = yield* Journal
    const approvals = yield* Approvals
    const policy = yield* PolicyEngine
    const tape = yield* makeTape(journal, { bufferLimit: options.liveBufferEvents })
    // Stages inside a run (prompt assembly) append through this tape too, so streams see them live.
    Option.map(yield* Effect.serviceOption(LiveTape), (live) => live.bind(tape.append))
    const approvers = yield* makeApprovers
    const maxMessageChars = options.maxMessageChars ?? 100_000
    const agents = yield* Effect.serviceOption(Agents.AgentRegistry).pipe(
      Effect.flatMap(
        Option.match({
          onSome: Effect.succeed,
          onNone: () =>
            Effect.flatMap(Effect.all({ model: ModelProvider, tools: ToolRuntime }), ({ model, tools }) =>
              Agents.make({
                defaults: { model, tools: tools.specs, instructions: options.instructions, budgets: options.budgets }
              })
            )
        })
      )
    )

    // Standing grants are evaluated by the policy engine when it can.
    const syncGrants: Effect.Effect<void> = policy.setGrants
      ? journal.listApprovals({ status: "approved" }).pipe(
          Effect.flatMap((all) => policy.setGrants!(all.filter((a) => a.scope !== "once"))),
          Effect.catchAll((e) => Effect.logError("could not load approval grants", e))
        )
      : Effect.void

    const startGate = makeStartGate(options.maxConcurrentStarts ?? 4)
    const deps = {
      startGate,
      journal,
      tape,
      agents,
      tools: yield* ToolRuntime,
      policy,
      approvals,
      prompt: yield* PromptAssembler,
      redactor: yield* CurrentRedactor,
      approvalTimeout: Duration.decode(options.approvalTimeout ?? "10 minutes"),
      requireApprovalChannel: options.requireApprovalChannel ?? true,
      coalesceChars: options.coalesceChars ?? 48,
      coalesceMillis: options.coalesceMillis ?? 40,
      hasApprover: approvers.has,
      onApprovalRequested: approvers.publish,
      onGrantsChanged: syncGrants,
      history: makeHistoryCache(journal, (s) => loadHistory(journal, s))
    }
    // A run's span is a child of the span of the request that admitted it (a client's trace goes on
    // into the run); runs picked up at start-up begin their own trace.
    const parents = new Map<RunId, Tracer.AnySpan>()
    // The run record admission wrote for a run it claimed and admitted with its start (dropped when
    // a cancel takes the claim or the commit fails), handed to its loop: not read again (its session
    // is, since a reset may commit in between).
    const admitted = new Map<RunId, Run>()
    const scheduler = yield* makeScheduler(journal, (runId, cancelledBy) => {
      const parent = parents.get(runId)
      parents.delete(runId)
      const run = admitted.get(runId)
      admitted.delete(runId)
      return runLoop(deps, runId, cancelledBy, parent, run)
    })

    // ---- access: the one place ownership is checked ----------------------------------------
    const session = (caller: Caller.Caller, id: SessionId) =>
      Effect.flatMap(journal.getSession(id), (found) => visible(caller, "session", id, found))
    const run = (caller: Caller.Caller, id: RunId) =>
      Effect.flatMap(journal.getRun(id), (found) => visible(caller, "run", id, found))
    const approval = (caller: Caller.Caller, id: ApprovalId, entity = "approval") =>
      Effect.flatMap(approvals.get(id), (found) => visible(caller, entity, id, found))
    const subscribeApprovalChanges = (caller: Caller.Caller) =>
      Effect.zipWith(approvers.subscribe(caller), approvals.subscribeResolutions, (requested, resolved) =>
        Stream.merge(
          requested,
          Stream.filter(resolved, (record) => Caller.owns(caller, record.principal))
        )
      )
    const withPolicy = (record: ApprovalRecord): Grant => ({
      ...record,
      policy: policy.describeGrant ? policy.describeGrant(record) : null
    })

    // ---- sessions --------------------------------------------------------------------------
    const newSession = (fields: Partial<Session> & { principal: string }) =>
      Effect.gen(function* () {
        const at = yield* Clock.currentTimeMillis
        const created = makeSession({ id: yield* makeSessionId, createdAt: at, updatedAt: at, ...fields })
        yield* journal.createSession(created)
        return created
      })

    /** An existing session keeps its agent: naming another one is a conflict. */
    const keepsAgent = (found: Session, agent: string | undefined) =>
      agent === undefined || agent === found.agentId
        ? Effect.succeed(found)
        : Effect.fail(
            new Conflict({ message: `session ${found.id} is answered by agent ${found.agentId}, not ${agent}` })
          )

    /**
     * The session a target names, or a new one described but not stored (`isNew`): its creator
     * stores it — `resolveSession` on its own, admission inside the run's first append.
     */
    const findOrDescribe = Effect.fnUntraced(function* (caller: Caller.Caller, target: SessionTarget) {
      if (caller.principal.length === 0) {
        return yield* new InvalidArgument({ message: "principal must not be empty", field: "principal" })
      }
      if (target.agent !== undefined && Option.isNone(agents.get(target.agent))) {
        return yield* new InvalidArgument({ message: `unknown agent ${target.agent}`, field: "agent" })
      }
      if (target.sessionId !== undefined) {
        const found = yield* session(caller, target.sessionId)
        if (found.archived) return yield* new Conflict({ message: `session ${found.id} is archived` })
        return { session: yield* keepsAgent(found, target.agent), isNew: false }
      }
      if (target.key !== undefined) {
        const existing = yield* journal.findSessionByKey(caller.principal, target.key)
        if (Option.isSome(existing)) return { session: yield* keepsAgent(existing.value, target.agent), isNew: false }
      }
      const bound =
        target.agent === undefined && target.channel !== undefined
          ? agents.bindingFor(target.channel, target.account, target.conversation)
          : Option.none()
      const at = yield* Clock.currentTimeMillis
      const described = makeSession({
        id: yield* makeSessionId,
        createdAt: at,
        updatedAt: at,
        principal: caller.principal,
        key: target.key ?? null,
        channel: target.channel ?? null,
        title: target.title ?? null,
        agentId: target.agent ?? Option.getOrElse(bound, () => DEFAULT_AGENT)
      })
      return { session: described, isNew: true }
    })

    const resolveSession: Service["resolveSession"] = Effect.fnUntraced(function* (
      caller: Caller.Caller,
      target: SessionTarget
    ) {
      const { session: found, isNew } = yield* findOrDescribe(caller, target)
      if (!isNew) return found
      return yield* journal.createSession(found).pipe(
        Effect.as(found),
        // Two concurrent creations with one key: the loser reuses the winner's session.
        Effect.catchTag("Conflict", (e) =>
          target.key === undefined
            ? Effect.fail(e)
            : journal
                .findSessionByKey(caller.principal, target.key)
                .pipe(
                  Effect.flatMap(
                    Option.match({ onNone: () => Effect.fail(e), onSome: (found) => keepsAgent(found, target.agent) })
                  )
                )
        )
      )
    }, traced("Gateway.resolveSession"))

    const updateSession = (current: Session, patch: Partial<Session>) =>
      Effect.gen(function* () {
        const next = { ...current, ...patch, updatedAt: yield* Clock.currentTimeMillis }
        yield* journal.updateSession(next)
        return next
      })

    // ---- runs ------------------------------------------------------------------------------
    const blobs = yield* Effect.serviceOption(BlobStore)
    const admitAttachments = (request: MessageRequest, agentId: string) =>
      Effect.gen(function* () {
        if (request.attachments === undefined || request.attachments.length === 0) return {}
        if (Option.isNone(blobs)) {
          return yield* new InvalidArgument({ message: "attachments need a blob store", field: "attachments" })
        }
        const agent = Option.getOrUndefined(agents.get(agentId))
        const modelNames = [...(agent?.models ?? []), ...(agent?.routing?.models ?? [])].map((m) => m.name)
        const refs = yield* Attachments.admit(request.attachments, {
          ...options.attachments,
          blobs: blobs.value,
          modelNames
        })
        return { attachments: refs }
      })

    /** Admit a run; a new session is created inside its first append (once, see `admit`). */
    const admitOnce = Effect.fnUntraced(function* (
      caller: Caller.Caller,
      request: MessageRequest,
      gate: StartGate,
      lost: { keyRace: boolean },
      /** Called once the caller is authorized, just before the run's first commit. */
      admitting?: ((run: Run) => void) | undefined
    ) {
      if (request.text.length === 0)
        return yield* new InvalidArgument({ message: "text must not be empty", field: "text" })
      if (request.text.length > maxMessageChars) {
        return yield* new InvalidArgument({
          message: `text is ${request.text.length} characters, over the limit of ${maxMessageChars}`,
          field: "text"
        })
      }
      // The admission's own work goes through the start gate; enqueueing does not (the run's fiber,
      // forked there, must not inherit the gate's scheduler). Once the admission is handed to the
      // journal, committing it and queueing the run are one uninterruptible region: a caller that goes
      // away then (a client disconnect) cannot leave an admitted run that nothing drives.
      const { target, created } = yield* Effect.uninterruptibleMask((restore) =>
        gate(
          Effect.gen(function* () {
            const { target, isNew, attachments, runId, at, head, span } = yield* restore(
              Effect.gen(function* () {
                const { session: target, isNew } = yield* findOrDescribe(caller, request)
                if (Option.isNone(agents.get(target.agentId))) {
                  return yield* new Conflict({
                    message: `session ${target.id} is bound to agent ${target.agentId}, which is no longer configured`
                  })
                }
                // A message without attachments (most) skips the generator's steps.
                const attachments =
                  request.attachments === undefined || request.attachments.length === 0
                    ? {}
                    : yield* admitAttachments(request, target.agentId)
                const runId = yield* makeRunId
                // The span read once, annotated and kept for the run's parent (`spanOf.ts`: no failure built).
                const span = yield* currentSpanOrUndefined
                const annotating = annotateSpan(span, { sessionId: target.id, runId })
                if (annotating !== undefined) yield* annotating
                const at = yield* Clock.currentTimeMillis
                const head = isNew ? 0 : yield* journal.headSeq(target.id)
                return { target, isNew, attachments, runId, at, head, span }
              })
            )
            const created: Run = {
              id: runId,
              sessionId: target.id,
              principal: caller.principal,
              state: "Pending",
              input: request.text,
              startSeq: head + 1,
              error: null,
              createdAt: at,
              updatedAt: at
            }
            const ref = { sessionId: target.id, runId }
            const queuedBehind = scheduler.lastOf(target.id) ?? null
            const accepted = {
              _tag: "RunAccepted" as const,
              ...ref,
              at,
              principal: caller.principal,
              queuedBehind,
              ...attachments
            }
            admitting?.(created)
            // An idle session's run is claimed (synchronously: later runs queue behind it) and
            // admitted with its start in one commit; a cancel before its worker picks it up takes
            // the claim (`cancelRun`). A failed commit stores nothing and gives the claim up.
            if (queuedBehind === null && scheduler.claim(target.id, runId)) {
              admitted.set(runId, { ...created, state: "InProgress" })
              if (span !== undefined) parents.set(runId, span)
              const stored = yield* recordAdmittedStart(
                tape,
                created,
                accepted,
                attachments,
                isNew ? target : undefined
              ).pipe(
                // One handler for both (this region is uninterruptible: it sees every failure, as
                // `onError` would, without `onError`'s mask and exit steps on the success path).
                Effect.tapErrorCause((cause) =>
                  Effect.suspend(() => {
                    // A session with this key was created meanwhile: the caller re-admits into it.
                    const failure = Cause.failureOption(cause)
                    if (Option.isSome(failure) && failure.value._tag === "Conflict")
                      lost.keyRace = isNew && request.key !== undefined
                    admitted.delete(runId)
                    parents.delete(runId)
                    return scheduler.unclaim(target.id, runId)
                  })
                )
              )
              // The loop's first prompt is built from these, not read back (`historyCache.started`).
              deps.history.started(target, stored)
              return { target, created, claimed: true }
            }
            const stored = yield* recordTransition(tape, ref, "Pending", "Accept", "admitted", {
              extra: [accepted],
              effects: { createRun: created }
            })
            // Queued: its start commit joins the history cache when the running run's events do.
            deps.history.started(target, stored)
            if (span !== undefined) parents.set(runId, span)
            return { target, created, claimed: false }
          })
        ).pipe(
          Effect.tap(({ target, created, claimed }) =>
            claimed ? scheduler.startClaimed(target.id) : scheduler.enqueue(target.id, created.id)
          )
        )
      )
      return { session: target, run: { ...created, state: "Accepted" as const } }
    }, traced("Gateway.admit"))

    const admit = (
      caller: Caller.Caller,
      request: MessageRequest,
      gate: StartGate = (effect) => effect,
      admitting?: (run: Run) => void
    ) => {
      const lost = { keyRace: false }
      return admitOnce(caller, request, gate, lost, admitting).pipe(
        // Two first messages with one new key: the loser's run goes into the winner's session.
        Effect.catchTag("Conflict", (e) =>
          lost.keyRace ? admitOnce(caller, request, gate, { keyRace: false }, admitting) : Effect.fail(e)
        )
      )
    }

    /** A started run's streams; the caller holds an approval channel until `release` (idempotent). */
    const streamsOf = (
      admitted: { readonly session: Session; readonly run: Run },
      release: () => void
    ): StartedRun => ({
      ...admitted,
      events: tape
        .subscribe(admitted.session.id, admitted.run.startSeq - 1, { runId: admitted.run.id })
        .pipe(Stream.ensuring(Effect.sync(release))),
      follow: Effect.zipLeft(
        tape.follow(admitted.session.id, admitted.run.startSeq - 1, { runId: admitted.run.id }),
        onScopeClose(Effect.sync(release))
      )
    })

    const startRun: Service["startRun"] = (caller, request) =>
      Effect.map(admit(caller, request, startGate), (admitted) => {
        // The caller is an approval channel for this run until it ends or the caller stops listening
        // (a counter and an idempotent release: no scope or fiber per run).
        const release = approvers.hold(caller, admitted.session.id)
        scheduler.onEnd(admitted.run.id, release)
        return streamsOf(admitted, release)
      })

    // The follower is attached by admission's `admitting` hook (after the caller is authorized,
    // before the first commit, so every event of the run is published to it); re-attached if the
    // admission is retried (a lost key race); closed when the start fails or the scope closes.
    const startRunFollowing: Service["startRunFollowing"] = (caller, request, options) =>
      Effect.uninterruptibleMask((restore) => {
        let follower: Follower | undefined
        const admitting = (run: Run) => {
          follower?.close()
          follower = tape.attachLive(run.sessionId, run.startSeq - 1, options?.session ? {} : { runId: run.id })
          options?.attached?.(follower, run)
        }
        return restore(admit(caller, request, startGate, admitting)).pipe(
          // Sees every failure (this region is uninterruptible once `restore` is over), without
          // `onError`'s mask and exit steps on the success path.
          Effect.tapErrorCause(() => Effect.sync(() => follower?.close())),
          Effect.flatMap((admitted) => {
            const attached = follower!
            const release = approvers.hold(caller, admitted.session.id)
            scheduler.onEnd(admitted.run.id, release)
            return Effect.as(
              onScopeClose(
                Effect.sync(() => {
                  attached.close()
                  release()
                })
              ),
              { ...streamsOf(admitted, release), follower: attached }
            )
          })
        )
      })

    const cancelRun: Service["cancelRun"] = Effect.fn("Gateway.cancelRun")(function* (
      caller: Caller.Caller,
      runId: RunId
    ) {
      const target = yield* run(caller, runId)
      if (isTerminal(target.state)) return target
      const ref = { sessionId: target.sessionId, runId }
      const by = `cancelled by ${caller.principal}`
      // Admitted with its start, not picked up by its worker yet: the cancel takes it (the worker
      // skips it) and it ends `Cancelled` with nothing else written. Uninterruptible, and a
      // cancellation that did not commit gives the run back: a taken run nobody records would stay
      // `InProgress` with nothing driving it.
      const took = yield* Effect.uninterruptible(
        Effect.suspend(() => {
          if (!scheduler.takeClaimed(runId)) return Effect.succeed(false)
          parents.delete(runId)
          admitted.delete(runId)
          return recordTransition(tape, ref, "InProgress", "Cancel", by).pipe(
            Effect.tapErrorCause(() => scheduler.untake(target.sessionId, runId)),
            Effect.tap(() => scheduler.dequeue(target.sessionId, runId)),
            Effect.as(true)
          )
        })
      )
      if (took) return yield* requireRun(journal, runId)
      if (yield* scheduler.interrupt(runId, caller.principal)) {
        // Its loop records the cancellation; if it could not (it logged why), record it here,
        // closing what the run left open.
        const after = yield* requireRun(journal, runId)
        if (!isTerminal(after.state)) {
          yield* cancelOutsideLoop(journal, tape, runId, caller.principal).pipe(
            Effect.catchAllCause((c) => Effect.logError("could not record cancellation", c))
          )
        }
        // The approvals it waited for were closed as it ended: tell the live inboxes.
        const closed = yield* journal.listApprovals({ runId, status: "expired" })
        yield* Effect.forEach(closed, approvals.announce, { discard: true })
        return isTerminal(after.state) ? after : yield* requireRun(journal, runId)
      }
      // Queued (not started yet): mark it cancelled; the worker skips terminal runs.
      yield* recordTransition(tape, ref, target.state, "Cancel", by)
      parents.delete(runId)
      yield* scheduler.dequeue(target.sessionId, runId)
      return yield* requireRun(journal, runId)
    })

    // ---- standing grants ---------------------------------------------------------------------
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

    // Compaction is the context engine's (when the prompt assembler is one); the Gateway checks access.
    const compactor = yield* Effect.serviceOption(Compactor)
    const withCompactor = <A>(f: (c: CompactorService) => Effect.Effect<A, GatewayError>) =>
      Option.match(compactor, {
        onNone: () =>
          Effect.fail(
            new Conflict({
              message: "compaction needs a context engine: use ContextEngine.layer from @palyra/core/context"
            })
          ),
        onSome: f
      })

    yield* syncGrants
    yield* recover(journal, tape, scheduler, options.onInterruptedRuns ?? "fail")

    const service: Service = {
      listAgents: () => Effect.succeed(agents.list.map(Agents.info)),
      resolveSession,
      getSession: session,
      listSessions: (caller, filter = {}) =>
        journal.listSessions({
          principal: caller.operator ? filter.principal : caller.principal,
          includeArchived: filter.includeArchived,
          limit: filter.limit
        }),
      resetSession: (caller, id) =>
        Effect.gen(function* () {
          const found = yield* session(caller, id)
          const head = yield* journal.headSeq(id)
          return yield* updateSession(found, { historyFromSeq: head, resetGeneration: found.resetGeneration + 1 })
        }),
      branchSession: (caller, id, o = {}) =>
        Effect.gen(function* () {
          const parent = yield* session(caller, id)
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
            parentSeq: atSeq,
            agentId: parent.agentId
          })
        }),
      archiveSession: (caller, id) => Effect.flatMap(session(caller, id), (s) => updateSession(s, { archived: true })),
      startRun,
      startRunFollowing,
      sendMessage: admit,
      cancelRun,
      getRun: run,
      // The principal is filtered in the journal, before the limit: a caller's page is full of its own runs.
      listRuns: (caller, filter) =>
        Effect.map(
          journal.listRuns({ ...filter, principal: caller.operator ? filter.principal : caller.principal }),
          (runs) => runs.filter((r) => Caller.owns(caller, r.principal))
        ),
      awaitRun: (caller, id) => Effect.zipRight(run(caller, id), scheduler.awaitEnd(id)),
      resolveApproval: (caller, decision) =>
        Effect.gen(function* () {
          yield* approval(caller, decision.approvalId)
          const record = yield* approvals.resolve({ ...decision, by: caller.principal })
          if (record.status === "approved" && record.scope !== "once") {
            yield* grantChanged(record, "granted", caller.principal)
            yield* syncGrants
          }
          return record
        }),
      getApproval: (caller, id) => approval(caller, id),
      listApprovals: (caller, filter) =>
        Effect.map(approvals.list(filter), (list) => list.filter((a) => Caller.owns(caller, a.principal))),
      listGrants: (caller) =>
        Effect.map(journal.listApprovals({}), (all) =>
          all
            .filter(
              (a) =>
                a.scope !== "once" &&
                (a.status === "approved" || a.status === "revoked") &&
                Caller.owns(caller, a.principal)
            )
            .map(withPolicy)
        ),
      revokeGrant: (caller, id) =>
        Effect.gen(function* () {
          yield* approval(caller, id, "grant")
          const at = yield* Clock.currentTimeMillis
          const record = yield* journal.revokeGrant(id, caller.principal, at)
          yield* grantChanged(record, "revoked", caller.principal)
          yield* syncGrants
          return withPolicy(record)
        }),
      registerApprover: (caller, sessionId) =>
        sessionId === undefined
          ? approvers.register(caller)
          : Effect.matchEffect(session(caller, sessionId), {
              onFailure: () => Effect.logDebug("approver not registered: no such session", { sessionId }),
              onSuccess: () => approvers.register(caller, sessionId)
            }),
      watchApprovals: approvers.watch,
      watchApprovalChanges: (caller) => Stream.unwrapScoped(subscribeApprovalChanges(caller)),
      subscribeApprovalChanges,
      subscribe: (caller, sessionId, afterSeq, o) =>
        Stream.unwrapScoped(
          Effect.gen(function* () {
            yield* session(caller, sessionId)
            if (o?.approver) yield* approvers.register(caller, sessionId)
            return tape.subscribe(sessionId, afterSeq)
          })
        ),
      follow: (caller, sessionId, afterSeq, o) =>
        Effect.gen(function* () {
          yield* session(caller, sessionId)
          if (o?.approver) yield* approvers.register(caller, sessionId)
          return yield* tape.follow(sessionId, afterSeq)
        }),
      readTape: (caller, sessionId, o) =>
        Effect.zipRight(
          session(caller, sessionId),
          journal.readTape(sessionId, { afterSeq: o.afterSeq, limit: o.limit })
        ),
      compactSession: (caller, id, o = {}) =>
        Effect.zipRight(
          session(caller, id),
          withCompactor((c) => c.compact(id, { preview: o.preview, runId: null }))
        ),
      listCheckpoints: (caller, id) =>
        Effect.zipRight(
          session(caller, id),
          withCompactor((c) => c.listCheckpoints(id))
        ),
      restoreCheckpoint: (caller, id, checkpointId) =>
        Effect.zipRight(
          session(caller, id),
          withCompactor((c) => c.restore(id, checkpointId, { by: caller.principal }))
        ),
      verifyJournal: (caller) =>
        caller.operator
          ? journal.verify
          : Effect.fail(new PermissionDenied({ message: "verifying the journal needs an operator" }))
    }
    return service
  })

/** @since 0.1.0 @category Layers */
export const layer = (
  options: Options = {}
): Layer.Layer<
  Gateway,
  JournalError | InvalidArgument,
  Journal | ModelProvider | ToolRuntime | PolicyEngine | Approvals | PromptAssembler
> => Layer.scoped(Gateway, make(options))
