/**
 * The run-start gate. A burst of starts (200 streams opened in the same instant) otherwise fills the
 * fiber scheduler's queue with every start's steps at once, and the events of runs already
 * streaming (their commits' replies, their deliveries) wait behind all of them.
 *
 * Start work (a message's admission, a run's `Start` transition) beyond `permits` starts at once
 * runs on its own scheduler, at most `permits` fiber steps per event-loop turn (`setImmediate`, the
 * check phase after the turn's I/O), so journal commit replies, socket writes and the deliveries
 * they trigger get in between. The starts stay concurrent, so their appends still share the
 * journal's commits (a semaphore instead, tried, made each start commit alone: ~3× the CPU per
 * start in a burst). Up to `permits` starts at once (a lone turn) run as before, at no cost.
 *
 * @internal
 */
import { Effect, RuntimeFlags, Scheduler } from "effect"

/** Run `effect` through the gate. @internal */
export type StartGate = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>

/**
 * A scheduler running at most `perTurn` tasks per event-loop turn (in `setImmediate`). Plain code
 * on purpose: it runs every deferred start step. @internal
 */
export const turnScheduler = (perTurn: number): Scheduler.Scheduler => {
  let queue: Array<Scheduler.Task> = []
  let head = 0
  let scheduled = false
  const turn = () => {
    const end = Math.min(head + perTurn, queue.length)
    for (let i = head; i < end; i++) {
      head = i + 1
      queue[i]!()
    }
    if (head < queue.length) {
      setImmediate(turn)
    } else {
      scheduled = false
      queue = []
      head = 0
    }
  }
  return Scheduler.make((task) => {
    queue.push(task)
    if (!scheduled) {
      scheduled = true
      setImmediate(turn)
    }
  })
}

/** A gate of `permits` (`Infinity`, or anything below 1: no gate). @internal */
export const makeStartGate = (permits: number): StartGate => {
  if (!Number.isFinite(permits) || permits < 1) return (effect) => effect
  const limit = Math.floor(permits)
  const scheduler = turnScheduler(limit)
  let active = 0
  const leave = Effect.sync(() => {
    active--
  })
  return (effect) =>
    Effect.withFiberRuntime((_, status) => {
      active++
      // Beyond the limit: `yieldNow` first, so even the start's first step waits its turn.
      const run = active <= limit ? effect : Effect.withScheduler(Effect.zipRight(Effect.yieldNow(), effect), scheduler)
      if (RuntimeFlags.interruptible(status.runtimeFlags)) return Effect.ensuring(run, leave)
      // Already uninterruptible (admission gates its commit so): both handlers always run, and
      // `ensuring`'s mask and finalizer steps are not needed.
      return Effect.matchCauseEffect(run, {
        onFailure: (cause) => {
          active--
          return Effect.failCause(cause)
        },
        onSuccess: (a) => {
          active--
          return Effect.succeed(a)
        }
      })
    })
}
