import { Chunk, Effect, Option, Stream } from "effect"
import type { NonEmptyReadonlyArray } from "effect/Array"
import { type JournalError, StreamLagged } from "../../domain/Errors.js"
import type { RunId, SessionId } from "../../domain/Ids.js"
import { isRunEnd, type NewTapeEvent, type TapeEvent } from "../../domain/TapeEvent.js"
import type { AppendEffects, Service as JournalService } from "../../ports/Journal.js"
import { makeHubs, type Subscriber } from "./hub.js"
import { makeKeyedLock } from "./sessionLock.js"

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
   * With `runId`, only that run's events, ending with the event that ends the run. A live subscriber
   * more than the buffer limit behind is cut off with `StreamLagged` (resume after its `lastSeq`).
   */
  readonly subscribe: (
    sessionId: SessionId,
    afterSeq: number,
    options?: { readonly runId?: RunId | undefined }
  ) => Stream.Stream<TapeEvent, JournalError | StreamLagged>
}

/** @internal */
export interface TapeOptions {
  /** Committed events a live subscriber may have waiting before it is cut off (default 4096). */
  readonly bufferLimit?: number | undefined
}

const REPLAY_PAGE = 512

/** @internal */
export const makeTape = (journal: JournalService, options: TapeOptions = {}): Effect.Effect<Tape> =>
  Effect.sync(() => {
    const limit = Math.max(1, options.bufferLimit ?? 4096)
    const hubs = makeHubs(limit)
    // Appends of one session are serialized with their publication, so live subscribers receive
    // events in tapeSeq order. Different sessions append concurrently.
    const locks = makeKeyedLock<SessionId>()

    // Journal first: only committed events are published, each event object once for every
    // subscriber (transports memoize their encoding of it, so it is encoded once per wire format).
    const append: Tape["append"] = (sessionId, events, effects) =>
      locks.withLock(
        sessionId,
        Effect.tap(journal.append(sessionId, events, effects), (stored) =>
          Effect.sync(() => hubs.publish(sessionId, stored))
        )
      )

    // One stage per subscriber: replay pages, then whatever the hub has buffered for it, filtered and
    // deduplicated inline. (Composing Stream operators costs a channel per stage per element.)
    const subscribe: Tape["subscribe"] = (sessionId, afterSeq, options = {}) =>
      Stream.unwrapScoped(
        Effect.gen(function* () {
          // Attach to live events first, then read the journal: every event is in one or the other.
          let current: Subscriber = hubs.attach(sessionId)
          yield* Effect.addFinalizer(() =>
            Effect.sync(() => {
              current.wake = undefined
              hubs.detach(sessionId, current)
            })
          )
          const runId = options.runId
          let last = afterSeq
          let replaying = true
          let ended = false
          const accept = (events: Iterable<TapeEvent>): Chunk.Chunk<TapeEvent> => {
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
            return Chunk.unsafeFromArray(out)
          }
          const take = () => {
            const buffered = current.buffer
            current.buffer = []
            return accept(buffered)
          }
          const pull: Effect.Effect<
            Chunk.Chunk<TapeEvent>,
            Option.Option<JournalError | StreamLagged>
          > = Effect.suspend(() => {
            if (ended) return Effect.fail(Option.none())
            if (current.lagged) {
              if (!replaying) {
                return Effect.fail(Option.some(new StreamLagged({ sessionId, lastSeq: last, limit })))
              }
              // Behind while still replaying: the journal has every event; attach again and read on.
              current = hubs.attach(sessionId)
            }
            if (replaying) {
              return journal.readTape(sessionId, { afterSeq: last, limit: REPLAY_PAGE }).pipe(
                Effect.mapError(Option.some),
                Effect.map((page) => {
                  if (page.length < REPLAY_PAGE) replaying = false
                  return accept(page)
                })
              )
            }
            if (current.buffer.length > 0) return Effect.succeed(take())
            return Effect.async<Chunk.Chunk<TapeEvent>, Option.Option<JournalError | StreamLagged>>((resume) => {
              const waiting = current
              waiting.wake = () => resume(pull)
              return Effect.sync(() => {
                waiting.wake = undefined
              })
            })
          })
          return Stream.repeatEffectChunkOption(pull)
        })
      )

    return { append, subscribe }
  })
