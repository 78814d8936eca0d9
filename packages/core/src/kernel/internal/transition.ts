import { Clock, Effect, Either, type MetricLabel, Option } from "effect"
import type { NonEmptyReadonlyArray } from "effect/Array"
import type {
  Conflict,
  InvalidTransition,
  JournalError,
  NotFound,
  PalyraError,
  PayloadTooLarge
} from "../../domain/Errors.js"
import type { RunId, SessionId } from "../../domain/Ids.js"
import type { ApprovalRecord } from "../../domain/Records.js"
import { isTerminal, transition as nextState, type RunState, type Transition } from "../../domain/RunState.js"
import type { NewTapeEvent, TapeEvent } from "../../domain/TapeEvent.js"
import { type AppendEffects, type Service as JournalService, readRunTape } from "../../ports/Journal.js"
import * as Metrics from "../Metrics.js"
import * as RunView from "../RunView.js"
import type { Tape } from "./tape.js"

/** @internal */
export interface RunRef {
  readonly sessionId: SessionId
  readonly runId: RunId
}

/**
 * The one way a run changes state: the state machine decides the next state (an illegal transition
 * is a typed error, never a silent overwrite), and the `RunStateChanged` event commits together with
 * the compare-and-set of the run's row — after any `extra` events that belong to the same moment.
 * @internal
 */
export const recordTransition = (
  tape: Tape,
  ref: RunRef,
  from: RunState,
  event: Transition,
  reason: string,
  options: {
    readonly extra?: ReadonlyArray<NewTapeEvent> | undefined
    readonly effects?: Omit<AppendEffects, "runTransition"> | undefined
    readonly error?: { readonly code: string; readonly message: string } | undefined
    /**
     * The fiber's metric labels when the caller read them already (the loop, once per run): the
     * transition is then counted with a plain call, not an Effect-wrapped metric update.
     */
    readonly metricLabels?: ReadonlyArray<MetricLabel.MetricLabel> | undefined
  } = {}
): Effect.Effect<ReadonlyArray<TapeEvent>, JournalError | PayloadTooLarge | NotFound | Conflict | InvalidTransition> =>
  // Plain steps (no generator): two or three of these per run, on the run's start and end path.
  Effect.clockWith(
    (
      clock
    ): Effect.Effect<
      ReadonlyArray<TapeEvent>,
      JournalError | PayloadTooLarge | NotFound | Conflict | InvalidTransition
    > => {
      const next = nextState(from, event)
      if (Either.isLeft(next)) return Effect.fail(next.left)
      const to = next.right
      const changed: NewTapeEvent = {
        _tag: "RunStateChanged",
        ...ref,
        at: clock.unsafeCurrentTimeMillis(),
        from,
        to,
        reason
      }
      const appended = tape.append(
        ref.sessionId,
        [...(options.extra ?? []), changed] as unknown as NonEmptyReadonlyArray<NewTapeEvent>,
        {
          ...options.effects,
          runTransition: { runId: ref.runId, from, to, error: options.error }
        }
      )
      const labels = options.metricLabels
      return labels === undefined
        ? Effect.tap(appended, () => Metrics.recordRunTransition(to))
        : Effect.map(appended, (stored) => {
            Metrics.unsafeRecord.runTransition(to, labels)
            return stored
          })
    }
  )

/**
 * What a run leaves open when it ends early, closed: every started call gets its result
 * (`cancelled` or `interrupted`), and every pending approval of the run is closed as expired (a
 * compare-and-set: one resolved meanwhile stays as it is), so nothing waits for a run that is gone.
 * Returns the events to write with the run's last state change.
 * @internal
 */
export const closeOpenWork = (
  journal: JournalService,
  ref: RunRef,
  view: RunView.RunView,
  why: "cancelled" | "interrupted",
  reason: string
): Effect.Effect<Array<NewTapeEvent>, PalyraError> =>
  Effect.gen(function* () {
    const at = yield* Clock.currentTimeMillis
    const events: Array<NewTapeEvent> = []
    for (const c of RunView.openCalls(view)) {
      if (c.started === undefined) continue
      events.push({
        _tag: "ToolResult",
        ...ref,
        at,
        toolCallId: c.proposed.toolCallId,
        tool: c.proposed.tool,
        status: why,
        output: `${why}: ${reason}`,
        truncated: false,
        durationMs: Math.max(0, at - c.started.at)
      })
    }
    const pending = yield* journal.listApprovals({ runId: ref.runId, status: "pending" })
    for (const a of pending) {
      const closed = yield* journal
        .resolveApproval(a.id, { status: "expired", scope: "once", resolver: "system", reason, resolvedAt: at })
        .pipe(Effect.option)
      if (Option.isSome(closed)) events.push(expiredEvent(ref, closed.value, at))
    }
    return events
  })

const expiredEvent = (ref: RunRef, a: ApprovalRecord, at: number): NewTapeEvent => ({
  _tag: "ApprovalResolved",
  ...ref,
  at,
  approvalId: a.id,
  toolCallId: a.toolCallId,
  decision: "expired",
  scope: "once",
  by: "system",
  reason: a.reason ?? "the run ended"
})

/**
 * Record the cancellation of a run that is not terminal, from outside its loop's body (cancelled in
 * its prologue, or a fallback after its fiber ended): its open work is closed as the body's own
 * cancellation closes it (started tool calls get an `interrupted`-style result, pending approvals
 * expire), then `Cancel`. Nothing when the run is already terminal.
 * @internal
 */
export const cancelOutsideLoop = (
  journal: JournalService,
  tape: Tape,
  runId: RunId,
  by: string
): Effect.Effect<void, PalyraError> =>
  Effect.flatMap(journal.getRun(runId), (found) => {
    if (Option.isNone(found) || isTerminal(found.value.state)) return Effect.void
    const run = found.value
    const ref = { sessionId: run.sessionId, runId }
    return readRunTape(journal, run).pipe(
      Effect.flatMap((events) =>
        closeOpenWork(journal, ref, RunView.fold(runId, events, run.state), "cancelled", `run cancelled by ${by}`)
      ),
      Effect.flatMap((closing) =>
        recordTransition(tape, ref, run.state, "Cancel", `cancelled by ${by}`, { extra: closing })
      ),
      Effect.asVoid
    )
  })
