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
  /**
   * Optional, a hook's cheap verdict from the run's terminal state and its loop's events alone (no
   * record, no tape): an effect that is all the hook would do for this end (a metric, say; run at
   * once, in the ending run's fiber, so it must be short and never fail), or `undefined` when the
   * hook needs `onRunEnd`. With one, a plain turn's end reads no run record and forks no hook fiber.
   * Asked only when the loop handed its events over (`RunEnd.events`).
   */
  readonly quick?: ((state: RunState, events: ReadonlyArray<TapeEvent>) => Effect.Effect<void> | undefined) | undefined
}

/** Nothing happens after a run. @since 0.1.0 @category Constructors */
export const none: Service = { onRunEnd: () => Effect.void }

/** @since 0.1.0 @category Tags */
export class RunHooks extends Context.Reference<RunHooks>()("@palyra/core/RunHooks", {
  defaultValue: () => none
}) {}

/** Every hook in turn (each one's failure is logged and the next still runs). @since 0.1.0 @category Constructors */
export const all = (hooks: ReadonlyArray<Service>): Service => ({
  onRunEnd: (end) => Effect.forEach(hooks, (hook) => guarded(hook, end), { discard: true }),
  // Quick only when every hook is (and each one's verdict is quick for this end).
  ...(hooks.every((hook) => hook.quick !== undefined)
    ? {
        quick: (state, events) => {
          const quick: Array<Effect.Effect<void>> = []
          for (const hook of hooks) {
            const q = hook.quick!(state, events)
            if (q === undefined) return undefined
            quick.push(q)
          }
          return Effect.all(quick, { discard: true })
        }
      }
    : {})
})

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
