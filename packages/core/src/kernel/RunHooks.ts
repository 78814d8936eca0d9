/**
 * What happens after a run: consumers that want to know when a run reaches a terminal state
 * (`Done`, `Failed`, `Cancelled`, …), e.g. post-run reflection (`@palyra/core/memory`).
 *
 * The scheduler calls `onRunEnd` once per run, after the terminal transition is on the tape and
 * after the run's subscribers were told, in a fiber of its own: a hook never delays a run's end, and
 * a hook that fails is logged, never the run's failure. The default (a `Context.Reference`) does
 * nothing; give `Kernel.layer({ runHooks })` a service to switch it on.
 *
 * @since 0.1.0
 */
import { Context, Effect } from "effect"
import * as Caller from "../domain/Caller.js"
import type { Run } from "../domain/Records.js"
import type { RunState } from "../domain/RunState.js"
import type { TapeEvent } from "../domain/TapeEvent.js"
import { traced } from "../ports/internal/traced.js"

/** A run that ended, with the principal it ran as. @since 0.1.0 @category Models */
export interface RunEnd {
  readonly run: Run
  /** The run's owner, as a non-operator caller (what the run acted as). */
  readonly caller: Caller.Caller
  /**
   * The run's committed events as its loop held them at the end (absent when no loop ended it: a
   * run cancelled while queued, a cancelled or crashed loop), in tape order; streamed
   * `AssistantDelta`s may be missing. Lets a hook decide without reading the run's tape back.
   */
  readonly events?: ReadonlyArray<TapeEvent> | undefined
}

/** @since 0.1.0 @category Models */
export interface Service {
  readonly onRunEnd: (end: RunEnd) => Effect.Effect<void, unknown>
}

/**
 * A hook's cheap verdict from the run's terminal state and its loop's events alone (no record, no
 * tape): an effect that is all its `onRunEnd` would do for this end (a metric, say), or `undefined`
 * when `onRunEnd` must run. The effect runs at once in the ending run's fiber, before the session's
 * next run starts, so it must be short; a failure or defect is logged, never the run's.
 *
 * @since 0.1.0
 * @category Models
 */
export type Quick = (state: RunState, events: ReadonlyArray<TapeEvent>) => Effect.Effect<void> | undefined

// Keyed by the `onRunEnd` function itself: a decorator that replaces `onRunEnd` (`{ ...hooks,
// onRunEnd: wrapped }`) has no verdict registered, so its wrapper is never skipped.
const quickChecks = new WeakMap<Service["onRunEnd"], Quick>()

/**
 * `service` with a quick verdict (`Quick`): when it answers an effect for a run the loop ended
 * (and no tracer reads spans — then `onRunEnd` runs, with its spans, as without one), the
 * scheduler runs that effect instead of reading the run's record and forking `onRunEnd`. A plain
 * turn's end then costs no read and no fiber.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const withQuick = (service: Service, quick: Quick): Service => {
  quickChecks.set(service.onRunEnd, quick)
  return service
}

/** The quick verdict `withQuick` gave `service`, if any. @since 0.1.0 @category Utils */
export const quickOf = (service: Service): Quick | undefined => quickChecks.get(service.onRunEnd)

/** Nothing happens after a run. @since 0.1.0 @category Constructors */
export const none: Service = { onRunEnd: () => Effect.void }

/** @since 0.1.0 @category Tags */
export class RunHooks extends Context.Reference<RunHooks>()("@palyra/core/RunHooks", {
  defaultValue: () => none
}) {}

/** Every hook in turn (each one's failure is logged and the next still runs). @since 0.1.0 @category Constructors */
export const all = (hooks: ReadonlyArray<Service>): Service => {
  const service: Service = {
    onRunEnd: (end) => Effect.forEach(hooks, (hook) => guarded(hook, end), { discard: true })
  }
  const checks = hooks.map(quickOf)
  // Quick only when every hook is (and each one's verdict is quick for this end); each verdict's
  // failure is logged on its own, so the next hook still hears of the run.
  if (checks.length === 0 || !checks.every((check) => check !== undefined)) return service
  return withQuick(service, (state, events) => {
    const quick: Array<Effect.Effect<void>> = []
    for (const check of checks) {
      const q = check!(state, events)
      if (q === undefined) return undefined
      quick.push(Effect.catchAllCause(q, (cause) => Effect.logWarning("an after-run hook failed", cause)))
    }
    return Effect.all(quick, { discard: true })
  })
}

/**
 * The terminal state a loop's events end with (the run's end event is always last), if they do.
 *
 * @since 0.1.0
 * @category Utils
 */
export const endState = (events: ReadonlyArray<TapeEvent>): RunState | undefined => {
  const last = events.at(-1)
  return last?._tag === "RunStateChanged" ? last.to : undefined
}

/**
 * Run a hook for an ended run: failures and defects are logged, never propagated.
 *
 * @since 0.1.0
 * @category Utils
 */
export const guarded = (hook: Service, end: RunEnd): Effect.Effect<void> =>
  Effect.suspend(() => hook.onRunEnd(end)).pipe(
    Effect.catchAllCause((cause) =>
      Effect.logWarning("an after-run hook failed", cause).pipe(Effect.annotateLogs("runId", end.run.id))
    ),
    // Once per run: no span (its object, attributes and context hop) when no tracer reads spans.
    traced("RunHooks.onRunEnd", { attributes: { runId: end.run.id, state: end.run.state } })
  )

/** The end of `run` as a hook sees it. @since 0.1.0 @category Constructors */
export const endOf = (run: Run, events?: ReadonlyArray<TapeEvent> | undefined): RunEnd =>
  events === undefined
    ? { run, caller: Caller.user(run.principal) }
    : { run, caller: Caller.user(run.principal), events }
