import type { SessionId } from "../../domain/Ids.js"
import type { TapeEvent } from "../../domain/TapeEvent.js"
import { tapeSubscribers } from "../Metrics.js"

/**
 * One live subscriber of a session: the committed events it has not taken yet, bounded by the hub's
 * limit. Publishing appends to `buffer` and calls `wake` once; it never waits for the subscriber.
 *
 * @internal
 */
export interface Subscriber {
  buffer: Array<TapeEvent>
  /** Set (and the subscriber detached) when taking `buffer` past the limit would have been needed. */
  lagged: boolean
  /** Called once after the next publication (the subscriber re-arms it when its buffer is empty). */
  wake: (() => void) | undefined
}

/**
 * The live fan-out: one set of subscribers per session with open subscribers, nothing for the others.
 * `publish` is synchronous and costs one array push per subscriber per event: no queue, fiber or
 * stream stage per subscriber, and a slow subscriber is cut off (`lagged`) instead of buffering
 * without bound or slowing the writer.
 *
 * @internal
 */
export interface Hubs {
  readonly attach: (sessionId: SessionId) => Subscriber
  readonly detach: (sessionId: SessionId, subscriber: Subscriber) => void
  readonly publish: (sessionId: SessionId, events: ReadonlyArray<TapeEvent>) => void
  /** Sessions with at least one live subscriber (for tests and metrics). */
  readonly size: () => number
}

/** @internal */
export const makeHubs = (limit: number): Hubs => {
  const hubs = new Map<SessionId, Set<Subscriber>>()
  // A wake-up runs the subscriber's own callback (`Follower.onReady`, public API) inside the
  // publication, which runs inside the journal's answer to a commit: one that throws must neither
  // stop the other subscribers' wake-ups nor the answers to the other writes of that commit.
  const wake = (s: Subscriber) => {
    const w = s.wake
    if (w === undefined) return
    s.wake = undefined
    try {
      w()
    } catch (defect) {
      process.emitWarning(`a tape subscriber's wake-up callback threw: ${String(defect)}`, "PalyraWarning")
    }
  }
  return {
    attach: (sessionId) => {
      const subscriber: Subscriber = { buffer: [], lagged: false, wake: undefined }
      let set = hubs.get(sessionId)
      if (set === undefined) {
        set = new Set()
        hubs.set(sessionId, set)
      }
      set.add(subscriber)
      // The gauge moved directly: an attach is on every stream's and every turn's path.
      tapeSubscribers.unsafeModify(1, [])
      return subscriber
    },
    detach: (sessionId, subscriber) => {
      const set = hubs.get(sessionId)
      if (set === undefined || !set.delete(subscriber)) return
      tapeSubscribers.unsafeModify(-1, [])
      if (set.size === 0) hubs.delete(sessionId)
    },
    publish: (sessionId, events) => {
      const set = hubs.get(sessionId)
      if (set === undefined) return
      for (const s of set) {
        if (s.buffer.length + events.length > limit) {
          s.lagged = true
          s.buffer = []
          set.delete(s)
          tapeSubscribers.unsafeModify(-1, [])
        } else {
          for (const e of events) s.buffer.push(e)
        }
        wake(s)
      }
      if (set.size === 0) hubs.delete(sessionId)
    },
    size: () => hubs.size
  }
}
