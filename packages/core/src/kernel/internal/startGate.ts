/**
 * The run-start gate: at most `permits` run starts (a message's admission, a run's `Start`
 * transition) do their work at once. A burst of starts (200 streams opened in the same instant)
 * otherwise fills the event loop with every start's steps at once, and the events of runs already
 * streaming wait behind all of them; through the gate they wait behind at most `permits` starts,
 * while the others queue without costing anything. Nothing that holds a permit waits for another
 * permit (an admission or a `Start` append never starts a run), so the gate cannot deadlock.
 *
 * @internal
 */
import { Effect } from "effect"

/** Run `effect` holding one of the gate's permits. @internal */
export type StartGate = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>

/** A gate of `permits` (`Infinity`, or anything below 1: no gate). @internal */
export const makeStartGate = (permits: number): StartGate => {
  if (!Number.isFinite(permits) || permits < 1) return (effect) => effect
  const semaphore = Effect.unsafeMakeSemaphore(Math.floor(permits))
  return semaphore.withPermits(1)
}
