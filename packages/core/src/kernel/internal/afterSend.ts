import { Effect } from "effect"

/**
 * Node's own `setImmediate`, taken when this module loads: a test's fake timers (vitest's
 * `useFakeTimers`, jest's) replace the global one, and a run's end must not wait for a clock the
 * test never advances.
 */
const immediate = globalThis.setImmediate

/**
 * Resumes once the event loop reached its check phase: after Node's native immediates, which is
 * where an HTTP/2 session sends the frames written during the current macrotask (`bench/stream/h2flush.ts`).
 *
 * A run's end commit answers inside a journal reply that often carries other runs' commits too; the
 * run's final events are written to its streams in that publication, but they leave only when the
 * macrotask ends. The scheduler frees the run's session first (so a caller that saw the end can start
 * the next run at once, unqueued), then waits here before the run's end work (its hooks and
 * waiters), so that work runs after those frames were sent instead of before them. It runs in the
 * scheduler's end-of-run finalizer (uninterruptible): it waits at most one turn of the event loop.
 *
 * @internal
 */
export const afterSend: Effect.Effect<void> = Effect.async<void>((resume) => {
  immediate(() => resume(Effect.void))
})
