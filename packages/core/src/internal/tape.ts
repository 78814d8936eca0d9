import { Chunk, Effect, Option, PubSub, type Queue, Stream } from "effect"
import type { NonEmptyReadonlyArray } from "effect/Array"
import type { JournalError } from "../Errors.js"
import type { SessionId } from "../Ids.js"
import type { AppendEffects, Service as JournalService } from "../Journal.js"
import type { NewTapeEvent, TapeEvent } from "../TapeEvent.js"

/** @internal */
export interface Tape {
  /** Append (journal first), then publish the stored events to live subscribers of the session. */
  readonly append: (
    sessionId: SessionId,
    events: NonEmptyReadonlyArray<NewTapeEvent>,
    effects?: AppendEffects
  ) => ReturnType<JournalService["append"]>
  /** Replay from the journal after `afterSeq`, then live events; no gap and no duplicate at the seam. */
  readonly subscribe: (sessionId: SessionId, afterSeq: number) => Stream.Stream<TapeEvent, JournalError>
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

    const subscribe: Tape["subscribe"] = (sessionId, afterSeq) =>
      Stream.unwrapScoped(
        Effect.gen(function* () {
          // Subscribe to live events first, then read the journal: every event is in one or the other.
          const hub = yield* acquireHub(sessionId)
          const live = yield* PubSub.subscribe(hub.pubsub)
          let last = afterSeq
          const replay = Stream.paginateChunkEffect(afterSeq, (cursor) =>
            journal.readTape(sessionId, { afterSeq: cursor, limit: REPLAY_PAGE }).pipe(
              Effect.map((page) => {
                const next = page.length === REPLAY_PAGE ? Option.some(page[page.length - 1]!.tapeSeq) : Option.none()
                return [Chunk.unsafeFromArray(page), next] as const
              })
            )
          )
          return Stream.concat(replay, Stream.fromQueue(live as Queue.Dequeue<TapeEvent>)).pipe(
            Stream.filter((event) => {
              if (event.tapeSeq <= last) return false
              last = event.tapeSeq
              return true
            })
          )
        })
      )

    return { append, subscribe }
  })
