import { Cause, Duration, Effect, Exit, Fiber, Option, Runtime } from "effect"

/**
 * `Effect.timeoutFail` that forks nothing for an effect that finishes without suspending (a tool
 * that computes, reads memory, or fails validation). `Effect.timeoutFail` races two forked fibers
 * (the effect and a sleep), ~100 µs of CPU per call on the loop's hot path. Here the effect first
 * runs synchronously in a fiber of its own (`Runtime.runSyncExit`, with the caller's context,
 * fiber refs and flags); when it finishes there, that is the answer (it took no time on the Effect
 * clock that a sleep could have won). Only an effect that suspends is then awaited against the rest
 * of its deadline on the Effect clock (so a `TestClock` drives it exactly as before) and, when the
 * deadline passes or the caller is interrupted, interrupted and awaited (like the loser of the race).
 * @internal
 */
export const timeoutFail =
  <E2>(options: { readonly duration: Duration.Duration; readonly onTimeout: () => E2 }) =>
  <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E | E2, R> =>
    Effect.clockWith((clock) =>
      Effect.flatMap(Effect.runtime<R>(), (runtime) => {
        const startedAt = clock.unsafeCurrentTimeMillis()
        const exit = Runtime.runSyncExit(runtime, self)
        if (Exit.isSuccess(exit)) return exit
        const defect = Cause.dieOption(exit.cause)
        if (Option.isNone(defect) || !Runtime.isAsyncFiberException(defect.value)) return exit
        // It suspended: its fiber goes on; wait for it against what is left of the deadline.
        const fiber = defect.value.fiber as Fiber.RuntimeFiber<A, E>
        const left = Duration.toMillis(options.duration) - (clock.unsafeCurrentTimeMillis() - startedAt)
        return Fiber.join(fiber).pipe(
          Effect.timeoutFail({ duration: Duration.millis(Math.max(0, left)), onTimeout: options.onTimeout }),
          Effect.onExit((result) => (Exit.isSuccess(result) ? Effect.void : Fiber.interrupt(fiber)))
        )
      })
    )
