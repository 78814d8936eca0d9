/**
 * `Follower`: a session's tape (replay, then live) behind plain callbacks, for transports' hot paths.
 * It delivers exactly what `Gateway.subscribe` streams — same order, same replay/live seam, same
 * cut-off of a subscriber that falls behind — without an Effect step per event: a live event costs
 * one push into the follower's bounded buffer and one `wake` per batch.
 *
 * ```ts
 * for (;;) {
 *   const r = follower.take()
 *   if (r === Follower.Done) break
 *   if (Follower.isFailed(r)) throw r.failure
 *   if (r === undefined) await new Promise<void>((wake) => follower.onReady(wake))
 *   else for (const event of r) send(event)
 * }
 * ```
 *
 * @since 0.1.0
 */
import type { JournalError, StreamLagged } from "../domain/Errors.js"
import type { TapeEvent } from "../domain/TapeEvent.js"

/** `take`: the stream ended (its run ended, or it was closed). @since 0.1.0 @category Models */
export const Done: unique symbol = Symbol.for("@palyra/core/Follower/Done")

/** `take`: the stream failed (and stays failed). @since 0.1.0 @category Models */
export interface Failed {
  readonly failure: JournalError | StreamLagged
}

/** @since 0.1.0 @category Guards */
export const isFailed = (u: unknown): u is Failed => typeof u === "object" && u !== null && "failure" in u

/**
 * `take` returns what is ready now: events in tapeSeq order, `Done`, a `Failed`, or `undefined` when
 * nothing is ready yet. `onReady(wake)` calls `wake` once when `take` may have something (at once
 * if it already may), `onReady(undefined)` disarms it. `close` detaches (the scope that opened the
 * follower also does).
 *
 * @since 0.1.0
 * @category Models
 */
export interface Follower {
  readonly take: () => ReadonlyArray<TapeEvent> | typeof Done | Failed | undefined
  readonly onReady: (wake: (() => void) | undefined) => void
  readonly close: () => void
}

/**
 * A transport's encoding of live events, memoized for the most recently encoded `size` events (by
 * identity; default 64). A published event is one object for every follower of its session, and
 * they all take it within the same publication (or its microtasks), so each wire format encodes it
 * once; a miss only encodes again (the same bytes). A small ring searched by identity rather than a
 * `WeakMap`: no ephemeron per event for the garbage collector to trace (~0.5 µs an event less).
 * The ring holds its events after their streams end: `keep` leaves out values not worth holding
 * (the transports keep frames of at most 64 KiB, so an idle ring holds at most a few MiB).
 *
 * @since 0.1.0
 * @category Encoding
 */
export const encodedOnce = <B>(
  encode: (event: TapeEvent) => B,
  size = 64,
  keep: (value: B) => boolean = () => true
): ((event: TapeEvent) => B) => {
  const n = Math.max(1, size)
  const keys = new Array<TapeEvent | undefined>(n)
  const values = new Array<B | undefined>(n)
  let next = 0
  return (event) => {
    // Newest first: the usual hit is the event just encoded for another follower.
    for (let k = 0, i = next; k < n; k++) {
      i = i === 0 ? n - 1 : i - 1
      if (keys[i] === event) return values[i] as B
    }
    const bytes = encode(event)
    if (!keep(bytes)) return bytes
    keys[next] = event
    values[next] = bytes
    next = next + 1 === n ? 0 : next + 1
    return bytes
  }
}
