import { Clock, Context, Duration, Effect, Exit, Fiber, type FiberStatus, Runtime } from "effect"

/**
 * `Effect.timeoutFail` that forks no racing fibers for an effect that finishes without suspending (a
 * tool that computes, reads memory, or fails validation). `Effect.timeoutFail` races two forked
 * fibers (the effect and a sleep), ~100 µs of CPU per call on the loop's hot path. Here the effect
 * starts at once in a fiber of its own on the default scheduler (`Runtime.runFork`, with the caller's
 * context and fiber refs), which runs it synchronously until it suspends or yields; when it has
 * already finished, that is the answer (it took no time on the Effect clock that a sleep could have
 * won). Otherwise it is awaited against the rest of its deadline on the Effect clock (so a
 * `TestClock` drives it exactly as before) and, when the deadline passes or the caller is
 * interrupted, interrupted and awaited (like the loser of the race). The default scheduler matters:
 * a long-running effect still yields to the event loop (timers, I/O, other fibers — and its own
 * deadline) as it does under `Effect.timeoutFail`.
 * @internal
 */
export const timeoutFail =
  <E2>(options: { readonly duration: Duration.Duration; readonly onTimeout: () => E2 }) =>
  <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E | E2, R> =>
    Effect.withFiberRuntime<A, E | E2, R>((fiber, status) => timeoutFailOn(fiber, status, options, self))

/**
 * `timeoutFail` given the caller's fiber and status (read by the caller's own `withFiberRuntime`,
 * which may have looked at other services in the same step): the clock and the caller's runtime
 * come from them (`clockWith` and `Effect.runtime` were three steps). Call it only from inside
 * `Effect.withFiberRuntime`, before any mask: the tool's fiber gets the caller's flags.
 * @internal
 */
export const timeoutFailOn = <A, E, R, E2>(
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  status: FiberStatus.Running,
  options: { readonly duration: Duration.Duration; readonly onTimeout: () => E2 },
  self: Effect.Effect<A, E, R>
): Effect.Effect<A, E | E2, R> => {
  const clock = Context.get(fiber.currentDefaultServices, Clock.Clock)
  const runtime = Runtime.make({
    context: fiber.currentContext as Context.Context<R>,
    runtimeFlags: status.runtimeFlags,
    fiberRefs: fiber.getFiberRefs()
  })
  // Uninterruptible between the fork and the wait: the tool's fiber is not a child of the caller,
  // so an interruption must not land before the wait below owns it.
  return Effect.uninterruptibleMask((restore) => {
    const startedAt = clock.unsafeCurrentTimeMillis()
    const forked = Runtime.runFork(runtime)(self)
    const done = forked.unsafePoll()
    if (done !== null) return done
    const left = Duration.toMillis(options.duration) - (clock.unsafeCurrentTimeMillis() - startedAt)
    return restore(
      Fiber.join(forked).pipe(
        Effect.timeoutFail({ duration: Duration.millis(Math.max(0, left)), onTimeout: options.onTimeout })
      )
    ).pipe(Effect.onExit((result) => (Exit.isSuccess(result) ? Effect.void : Fiber.interrupt(forked))))
  })
}
