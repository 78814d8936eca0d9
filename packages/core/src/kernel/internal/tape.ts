import { Cause, Chunk, Effect, Exit, Option, RuntimeFlags, type Scope, Stream } from "effect"
import type { NonEmptyReadonlyArray } from "effect/Array"
import { type JournalError, StreamLagged } from "../../domain/Errors.js"
import type { RunId, SessionId } from "../../domain/Ids.js"
import { isRunEnd, type NewTapeEvent, type TapeEvent } from "../../domain/TapeEvent.js"
import {
  type AppendEffects,
  type AppendError,
  type AppendNow,
  appendNowOf,
  type Service as JournalService
} from "../../ports/Journal.js"
import { Done, type Failed, type Follower, isFailed } from "../Follower.js"
import { makeHubs, type Subscriber } from "./hub.js"
import { onScopeClose } from "./onScopeClose.js"
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
   * `append` as a plain call, when the journal has its plain form: the lock, the commit and its
   * publication as in `append`, then `done` with the commit's exit — no Effect step. For an
   * uninterruptible caller's hot path (the loop's streamed deltas): the write cannot be abandoned.
   */
  readonly appendWith?: AppendWith | undefined
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
  /** `subscribe` as a plain follower, open until the scope closes (for transports' hot paths). */
  readonly follow: (
    sessionId: SessionId,
    afterSeq: number,
    options?: { readonly runId?: RunId | undefined }
  ) => Effect.Effect<Follower, never, Scope.Scope>
  /**
   * Events a writer should put in one append at most when it may choose (the loop joining the deltas
   * of one read): half the live buffer limit, at most 256, so one publication never cuts off a live
   * subscriber that is keeping up.
   */
  readonly burstLimit: number
  /**
   * A follower of the session's live events only (no replay), attached now: for a caller about to
   * append (a run's admission), so what it then commits reaches the follower by the publication,
   * not read back. Filtered to `runId` (ending with it) when given, else the whole session. The
   * caller closes it.
   */
  readonly attachLive: (
    sessionId: SessionId,
    afterSeq: number,
    options: { readonly runId?: RunId | undefined }
  ) => Follower
}

/** `Tape.appendWith`. @internal */
export type AppendWith = (
  sessionId: SessionId,
  events: NonEmptyReadonlyArray<NewTapeEvent>,
  effects: AppendEffects | undefined,
  done: (exit: Exit.Exit<ReadonlyArray<TapeEvent>, AppendError>) => void
) => void

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
    // Waiting for the lock can be interrupted (unless the caller is uninterruptible: the loop's
    // writes are, so a run queued behind another write of its session is cancelled once its own
    // write has committed — one commit later); once the lock is held, the commit and its
    // publication cannot be: a write handed to the journal commits anyway, and an event committed
    // but never published would be a gap for every live follower.
    const appendNow = appendNowOf(journal)
    const plain = appendNow === undefined ? undefined : plainAppend(appendNow)
    const append: Tape["append"] =
      plain === undefined
        ? // A journal without the plain form (or decorated): the same guarantees in Effect steps.
          (sessionId, events, effects) =>
            locks.withLockUninterruptible(
              sessionId,
              Effect.map(journal.append(sessionId, events, effects), (stored) => {
                hubs.publish(sessionId, stored)
                return stored
              })
            )
        : plain.append

    // ---- the hot path: one `Effect.async` per append ----
    // The lock, the journal's write and the publication are plain calls: the lock is taken with a
    // callback, the write handed to the journal's `appendNow`, and its callback publishes, releases
    // the lock (handing it straight to the next append of the session) and resumes the fiber. The
    // commit and its publication run in that callback whatever becomes of the fiber, so they are
    // uninterruptible by construction. An interruptible caller gets a canceler: while it waits for
    // the lock, it leaves the queue; once its write was handed over, the interruption waits for the
    // commit and its publication (as the Effect form's uninterruptible region did). An
    // uninterruptible caller (the loop) gets none, so no interruption handler is installed per append.
    // (Measured against the Effect form: PERF-NOTES round 7, the append path.)
    function plainAppend(appendNow: AppendNow): { readonly append: Tape["append"]; readonly appendWith: AppendWith } {
      // Releases are trampolined: a write that fails at once (a closed journal) releases inside the
      // grant of the next, which would otherwise recurse once per waiting append.
      const releases: Array<SessionId> = []
      let releasing = false
      const release = (sessionId: SessionId) => {
        releases.push(sessionId)
        if (releasing) return
        releasing = true
        try {
          for (let i = 0; i < releases.length; i++) locks.release(releases[i]!)
        } finally {
          releases.length = 0
          releasing = false
        }
      }
      // The lock, the write handed to the journal, then (in its callback) the publication, the
      // release and `done`: shared by both forms below.
      const write = (
        sessionId: SessionId,
        events: NonEmptyReadonlyArray<NewTapeEvent>,
        effects: AppendEffects | undefined,
        done: (exit: Exit.Exit<ReadonlyArray<TapeEvent>, AppendError>) => void,
        granted?: () => void
      ) => {
        let answered = false
        const finish = (exit: Exit.Exit<ReadonlyArray<TapeEvent>, AppendError>) => {
          answered = true
          try {
            if (Exit.isSuccess(exit)) hubs.publish(sessionId, exit.value)
          } finally {
            release(sessionId)
            done(exit)
          }
        }
        return locks.acquire(sessionId, () => {
          granted?.()
          try {
            appendNow(sessionId, events, effects, finish)
          } catch (defect) {
            if (!answered) finish(Exit.die(defect))
          }
        })
      }
      const start = (
        interruptible: boolean,
        sessionId: SessionId,
        events: NonEmptyReadonlyArray<NewTapeEvent>,
        effects: AppendEffects | undefined
      ) =>
        Effect.async<ReadonlyArray<TapeEvent>, AppendError>((resume) => {
          // 0 waiting for the lock, 1 written (awaiting the commit), 2 committed and published.
          let state = 0
          let settled: (() => void) | undefined
          const ticket = write(
            sessionId,
            events,
            effects,
            (exit) => {
              state = 2
              resume(exit)
              settled?.()
            },
            () => {
              state = 1
            }
          )
          if (!interruptible) return
          return Effect.suspend(() => {
            if (state === 0 && ticket.cancel()) return Effect.void
            if (state === 2) return Effect.void
            return Effect.async<void>((wake) => {
              settled = () => wake(Effect.void)
            })
          })
        })
      const append: Tape["append"] = (sessionId, events, effects) =>
        Effect.withFiberRuntime((_, status) =>
          start(RuntimeFlags.interruptible(status.runtimeFlags), sessionId, events, effects)
        )
      const appendWith: AppendWith = (sessionId, events, effects, done) => {
        write(sessionId, events, effects, done)
      }
      return { append, appendWith }
    }

    /** The seq of the first event after `last` in a buffer (tapeSeq order), or +∞. */
    const firstNewOf = (buffer: ReadonlyArray<TapeEvent>, last: number) => {
      for (const e of buffer) if (e.tapeSeq > last) return e.tapeSeq
      return Number.POSITIVE_INFINITY
    }

    // A follower: replay pages, then whatever the hub has buffered for it, filtered and deduplicated
    // inline, behind a plain take/onReady interface (no Effect step per event).
    const open = (
      sessionId: SessionId,
      afterSeq: number,
      options: { readonly runId?: RunId | undefined } = {},
      /** Live only: attached before anything after `afterSeq` was appended, so there is nothing to replay. */
      live = false
    ): Follower => {
      // Attach to live events first, then read the journal: every event is in one or the other.
      let current: Subscriber = hubs.attach(sessionId)
      const runId = options.runId
      let last = afterSeq
      let replaying = !live
      // A live follower has taken from the hub once (its seam checked).
      let seen = !live
      let ended = false
      let closed = false
      let failure: JournalError | StreamLagged | undefined
      // A read that died (a defect, not a typed failure): `take` rethrows it.
      let defect: { readonly value: unknown } | undefined
      // Replay: the page read last (not yet taken), whether a read is under way, who waits for it.
      let page: ReadonlyArray<TapeEvent> | undefined
      let reading = false
      let waiting: (() => void) | undefined
      const accept = (events: Iterable<TapeEvent>): ReadonlyArray<TapeEvent> => {
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
      const read = () => {
        reading = true
        const fiber = Effect.runFork(journal.readTape(sessionId, { afterSeq: last, limit: REPLAY_PAGE }))
        fiber.addObserver((exit) => {
          reading = false
          if (closed) return
          if (Exit.isSuccess(exit)) page = exit.value
          else {
            const error = Cause.failureOption(exit.cause)
            if (Option.isSome(error)) failure = error.value
            else defect = { value: Cause.squash(exit.cause) }
          }
          const w = waiting
          waiting = undefined
          w?.()
        })
      }
      const take = (): ReadonlyArray<TapeEvent> | typeof Done | Failed | undefined => {
        for (;;) {
          if (ended || closed) return Done
          if (defect !== undefined) throw defect.value
          if (failure !== undefined) return { failure }
          if (current.lagged) {
            if (!replaying) {
              failure = new StreamLagged({ sessionId, lastSeq: last, limit })
              return { failure }
            }
            // Behind while still replaying: the journal has every event; attach again and read on.
            current = hubs.attach(sessionId)
          }
          if (replaying) {
            if (page === undefined) {
              if (!reading) read()
              if (page === undefined) {
                if (failure !== undefined || defect !== undefined) continue
                return undefined
              }
            }
            const read_ = page
            page = undefined
            if (read_.length < REPLAY_PAGE) replaying = false
            const out = accept(read_)
            if (out.length > 0 || ended) return out.length > 0 ? out : Done
            continue
          }
          if (current.buffer.length === 0) return undefined
          // A whole-session live follower sees every event of the session: a first new event past
          // `last + 1` means some were published before it attached (after its caller read the
          // head) — read them, then take the buffer as a replaying follower does.
          if (live && runId === undefined && !seen && firstNewOf(current.buffer, last) > last + 1) {
            seen = true
            replaying = true
            continue
          }
          seen = true
          const buffered = current.buffer
          current.buffer = []
          const out = accept(buffered)
          if (out.length > 0) return out
          if (ended) return Done
        }
      }
      const onReady = (wake: (() => void) | undefined) => {
        if (replaying && reading && wake !== undefined) {
          waiting = wake
          current.wake = undefined
          return
        }
        waiting = undefined
        current.wake = wake
        const ready =
          current.buffer.length > 0 || current.lagged || replaying || failure !== undefined || defect !== undefined
        if (wake !== undefined && ready) {
          current.wake = undefined
          wake()
        }
      }
      const close = () => {
        closed = true
        waiting = undefined
        current.wake = undefined
        hubs.detach(sessionId, current)
      }
      return { take, onReady, close }
    }

    // Opened and its close registered in one uninterruptible region (`acquireRelease`'s form,
    // without its fiber-ref diff and patch at every close: `onScopeClose`).
    const follow: Tape["follow"] = (sessionId, afterSeq, options) =>
      Effect.uninterruptible(
        Effect.suspend(() => {
          const f = open(sessionId, afterSeq, options)
          return Effect.as(onScopeClose(Effect.sync(f.close)), f)
        })
      )

    // The Effect form: one stage per subscriber over the same follower. (Composing Stream operators
    // costs a channel per stage per element.)
    const subscribe: Tape["subscribe"] = (sessionId, afterSeq, options = {}) =>
      Stream.unwrapScoped(
        Effect.map(follow(sessionId, afterSeq, options), (f) => {
          const pull: Effect.Effect<
            Chunk.Chunk<TapeEvent>,
            Option.Option<JournalError | StreamLagged>
          > = Effect.suspend(() => {
            const r = f.take()
            if (r === undefined) {
              return Effect.async<Chunk.Chunk<TapeEvent>, Option.Option<JournalError | StreamLagged>>((resume) => {
                f.onReady(() => resume(pull))
                return Effect.sync(() => f.onReady(undefined))
              })
            }
            if (r === Done) return Effect.fail(Option.none())
            if (isFailed(r)) return Effect.fail(Option.some(r.failure))
            return Effect.succeed(Chunk.unsafeFromArray(r as Array<TapeEvent>))
          })
          return Stream.repeatEffectChunkOption(pull)
        })
      )

    const attachLive: Tape["attachLive"] = (sessionId, afterSeq, options) => open(sessionId, afterSeq, options, true)

    return {
      append,
      appendWith: plain?.appendWith,
      subscribe,
      follow,
      attachLive,
      burstLimit: Math.max(1, Math.min(256, Math.floor(limit / 2)))
    }
  })
