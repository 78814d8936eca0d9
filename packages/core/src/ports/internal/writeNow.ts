import type { Effect, Exit } from "effect"

/**
 * The plain form of a write a `SinkNow` returns: it starts the write at once and calls `done` with
 * its exit when it has completed (maybe synchronously). It performs exactly the write the effect
 * performs, uninterruptibly: once started it cannot be abandoned, so whoever starts it and is then
 * interrupted must wait for `done` before its interruption completes.
 * @internal
 */
export type WriteNow<E> = (done: (exit: Exit.Exit<void, E>) => void) => void

const writeNowKey: unique symbol = Symbol.for("@palyra/core/ModelProvider/writeNow")

/**
 * Attach the plain form of `effect` to it (like `Journal.withAppendNow`): a provider that pushes
 * events from plain callbacks (a timer, a socket's data) can then run the sink's write without
 * resuming its fiber, and one that cannot tell runs the effect. Mutates and returns `effect`: for an
 * effect made once and returned for many events (the loop's held-delta write).
 * @internal
 */
export const withWriteNow = <E>(effect: Effect.Effect<void, E>, now: WriteNow<E>): Effect.Effect<void, E> =>
  Object.assign(effect, { [writeNowKey]: now })

/** The plain form of a sink's write, when it has one (`withWriteNow`). @internal */
export const writeNowOf = <E>(effect: Effect.Effect<void, E>): WriteNow<E> | undefined =>
  (effect as Effect.Effect<void, E> & { readonly [writeNowKey]?: WriteNow<E> })[writeNowKey]
