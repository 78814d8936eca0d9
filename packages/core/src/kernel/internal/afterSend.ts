import { Effect } from "effect"

/**
 * Resumes once the event loop reached its check phase: after Node's native immediates, which is
 * where an HTTP/2 session sends the frames written during the current macrotask (`bench/stream/h2flush.ts`).
 *
 * A run's end commit answers inside a journal reply that often carries other runs' commits too; the
 * run's final events are written to its streams in that publication, but they leave only when the
 * macrotask ends. The run's end-of-run work (the loop's tail, the scheduler's end, after-run hooks,
 * the stream's teardown) waits here, so it runs after those frames were sent instead of before them.
 * Uninterruptible: it waits at most one turn of the event loop, and the run it defers is already terminal.
 *
 * @internal
 */
export const afterSend: Effect.Effect<void> = Effect.uninterruptible(
  Effect.async<void>((resume) => {
    setImmediate(() => resume(Effect.void))
  })
)
