import { Chunk, Effect, Option, PubSub, Queue, Stream } from "effect"
import type { NonEmptyReadonlyArray } from "effect/Array"
import type { JournalError } from "../../domain/Errors.js"
import type { RunId, SessionId } from "../../domain/Ids.js"
import { isRunEnd, type NewTapeEvent, type TapeEvent } from "../../domain/TapeEvent.js"
import type { AppendEffects, Service as JournalService } from "../../ports/Journal.js"

/** @internal */
export interface Tape {
  /** Append (journal first), then publish the stored events to live subscribers of the session. */
  readonly append: (
    sessionId: SessionId,
    events: NonEmptyReadonlyArray<NewTapeEvent>,
    effects?: AppendEffects
  ) => ReturnType<JournalService["append"]>
  /**
   * Replay from the journal after `afterSeq`, then live events; no gap and no duplicate at the seam.
   * With `runId`, only that run's events, ending with the event that ends the run.
   */
  readonly subscribe: (
    sessionId: SessionId,
    afterSeq: number,
    options?: { readonly runId?: RunId | undefined }
  ) => Stream.Stream<TapeEvent, JournalError>
}

interface Hub {
  readonly pubsub: PubSub.PubSub<TapeEvent>
  subscribers: number
}

const REPLAY_PAGE = 512

/** @internal */
export const makeTape = (journal: JournalService): Effect.Effect<Tape> =>
  Effect.gen(function* () {
    const hubs = new Map<SessionId, Hub>()
    const locks = new Map<SessionId, { readonly semaphore: Effect.Semaphore; users: number }>()

    // Appends of one session are serialized with their publication, so live subscribers receive
    // events in tapeSeq order. Different sessions append concurrently.
    const withSessionLock = <A, E, R>(sessionId: SessionId, effect: Effect.Effect<A, E, R>) =>
      Effect.acquireUseRelease(
        Effect.sync(() => {
          let entry = locks.get(sessionId)
          if (entry === undefined) {
            entry = { semaphore: Effect.unsafeMakeSemaphore(1), users: 0 }
            locks.set(sessionId, entry)
          }
          entry.users++
          return entry
        }),
        (entry) => entry.semaphore.withPermits(1)(effect),
        (entry) =>
          Effect.sync(() => {
            if (--entry.users === 0) locks.delete(sessionId)
          })
      )

    const append: Tape["append"] = (sessionId, events, effects) =>
      withSessionLock(
        sessionId,
        Effect.tap(journal.append(sessionId, events, effects), (stored) => {
          const hub = hubs.get(sessionId)
          return hub ? PubSub.publishAll(hub.pubsub, stored) : Effect.void
        })
      )

    const acquireHub = (sessionId: SessionId) =>
      Effect.acquireRelease(
        Effect.gen(function* () {
          let hub = hubs.get(sessionId)
          if (hub === undefined) {
            hub = { pubsub: yield* PubSub.unbounded<TapeEvent>(), subscribers: 0 }
            hubs.set(sessionId, hub)
          }
          hub.subscribers++
          return hub
        }),
        (hub) =>
          Effect.suspend(() => {
            if (--hub.subscribers > 0) return Effect.void
            hubs.delete(sessionId)
            return PubSub.shutdown(hub.pubsub)
          })
      )

    // One stage: replay pages, then batches from the live queue, filtered and deduplicated inline.
    // (Composing Stream operators here costs a channel per stage per element; this is the hot path.)
    const subscribe: Tape["subscribe"] = (sessionId, afterSeq, options = {}) =>
      Stream.unwrapScoped(
        Effect.gen(function* () {
          // Subscribe to live events first, then read the journal: every event is in one or the other.
          const hub = yield* acquireHub(sessionId)
          const live = yield* PubSub.subscribe(hub.pubsub)
          const runId = options.runId
          let last = afterSeq
          let replaying = true
          let ended = false
          const accept = (events: Iterable<TapeEvent>): Array<TapeEvent> => {
            const out: Array<TapeEvent> = []
            for (const e of events) {
              if (ended || e.tapeSeq <= last) continue
              last = e.tapeSeq
              if (runId !== undefined) {
                if (e.runId !== runId) continue
                if (isRunEnd(e)) ended = true
              }
              out.push(e)
            }
            return out
          }
          const pull: Effect.Effect<Chunk.Chunk<TapeEvent>, Option.Option<JournalError>> = Effect.suspend(() => {
            if (ended) return Effect.fail(Option.none())
            if (replaying) {
              return journal.readTape(sessionId, { afterSeq: last, limit: REPLAY_PAGE }).pipe(
                Effect.mapError(Option.some),
                Effect.map((page) => {
                  if (page.length < REPLAY_PAGE) replaying = false
                  return Chunk.unsafeFromArray(accept(page))
                })
              )
            }
            return Effect.map(Queue.takeBetween(live, 1, REPLAY_PAGE), (chunk) => Chunk.unsafeFromArray(accept(chunk)))
          })
          return Stream.repeatEffectChunkOption(pull)
        })
      )

    return { append, subscribe }
  })
