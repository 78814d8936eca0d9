/**
 * The tape over a journal's plain append (`Journal.appendNow`): the tape takes its per-session lock
 * with a callback, hands the write over and publishes from the journal's callback. The same
 * guarantees as the Effect form: gap-free order for a live subscriber with appends never
 * interleaved; an append interrupted while it waits for the lock leaves the queue, one interrupted
 * after its write was handed over waits for its commit and publication; failures arrive typed, a
 * journal failing every write at once does not recurse per waiting append; a decorator that
 * replaces `append` is never bypassed.
 */
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Either, Exit, Fiber, Stream } from "effect"
import { Errors, Journal, MemoryJournal, Records, type TapeEvent } from "../src/index.js"
import { makeTape } from "../src/kernel/internal/tape.js"

const SESSION = "01KA0000000000000000000SES" as never
const RUN = "01KA0000000000000000000RUN" as never

const delta = (text: string) =>
  ({ _tag: "TextDelta", sessionId: SESSION, runId: RUN, at: 1, text }) as unknown as TapeEvent.NewTapeEvent

/**
 * A memory journal with a plain append whose commits can be held: while `hold` is set, a write's
 * outcome waits in `held` until `releaseAll`; with `closed` set, every write fails at once.
 */
const plainJournal = Effect.gen(function* () {
  const inner = yield* MemoryJournal.make()
  yield* inner.createSession(Records.makeSession({ id: SESSION, principal: "alice" }))
  const state = { plain: 0, effect: 0, hold: false, closed: false, held: [] as Array<() => void> }
  const appendNow: Journal.AppendNow = (sessionId, events, effects, done) => {
    state.plain++
    if (state.closed) return done(Exit.fail(new Errors.JournalError({ method: "append", message: "closed" })))
    const hold = state.hold
    Effect.runCallback(inner.append(sessionId, events, effects), {
      onExit: (exit) => (hold ? state.held.push(() => done(exit)) : done(exit))
    })
  }
  const append: Journal.Service["append"] = (sessionId, events, effects) => {
    state.effect++
    return inner.append(sessionId, events, effects)
  }
  const journal: Journal.Service = { ...inner, append: Journal.withAppendNow(append, appendNow) }
  const releaseAll = () => {
    for (const f of state.held.splice(0)) f()
  }
  return { journal, state, releaseAll }
})

/** Yield to the scheduler until `cond` holds (a real delay per round, bounded). */
const until = (cond: () => boolean) =>
  Effect.gen(function* () {
    for (let i = 0; i < 500 && !cond(); i++) yield* Effect.sleep("2 millis")
    assert.isTrue(cond())
  })

describe("Tape over Journal.appendNow", () => {
  it.live("concurrent appends take the plain path and stay gap-free, in order and unmixed for a subscriber", () =>
    Effect.gen(function* () {
      const { journal, state } = yield* plainJournal
      const tape = yield* makeTape(journal)
      const appends = 300
      const received = yield* Effect.fork(tape.subscribe(SESSION, 0).pipe(Stream.take(appends * 2), Stream.runCollect))
      yield* Effect.yieldNow()
      yield* Effect.forEach(
        Array.from({ length: appends }, (_, i) => i),
        (i) => Effect.uninterruptible(tape.append(SESSION, [delta(`a${i}`), delta(`b${i}`)])),
        { concurrency: "unbounded", discard: true }
      )
      const events = Chunk.toReadonlyArray(yield* Fiber.join(received)) as ReadonlyArray<
        TapeEvent.TapeEvent & { text: string }
      >
      assert.deepStrictEqual(
        events.map((e) => e.tapeSeq),
        Array.from({ length: appends * 2 }, (_, i) => i + 1)
      )
      for (let i = 0; i < events.length; i += 2)
        assert.strictEqual(events[i]!.text.slice(1), events[i + 1]!.text.slice(1))
      assert.strictEqual(state.plain, appends)
      assert.strictEqual(state.effect, 0)
    })
  )

  it.live("a decorator that replaces append drops the plain form: the tape goes through the decorator", () =>
    Effect.gen(function* () {
      const { journal, state } = yield* plainJournal
      let decorated = 0
      const wrapped: Journal.Service = {
        ...journal,
        append: (sessionId, events, effects) => {
          decorated++
          return journal.append(sessionId, events, effects)
        }
      }
      assert.isDefined(Journal.appendNowOf(journal))
      assert.isUndefined(Journal.appendNowOf(wrapped))
      const tape = yield* makeTape(wrapped)
      const stored = yield* tape.append(SESSION, [delta("x")])
      assert.strictEqual(stored[0]!.tapeSeq, 1)
      assert.strictEqual(decorated, 1)
      assert.strictEqual(state.plain, 0)
    })
  )

  it.live(
    "interrupted while waiting it leaves the queue; interrupted after handing its write over, it waits for the commit and publication",
    () =>
      Effect.gen(function* () {
        const { journal, state, releaseAll } = yield* plainJournal
        const tape = yield* makeTape(journal)
        const live = yield* Effect.fork(tape.subscribe(SESSION, 0).pipe(Stream.take(2), Stream.runCollect))
        yield* Effect.yieldNow()
        state.hold = true
        const first = yield* Effect.fork(tape.append(SESSION, [delta("first")]))
        const second = yield* Effect.fork(tape.append(SESSION, [delta("second")]))
        yield* until(() => state.held.length === 1)
        // The second waits for the lock: interrupting it returns at once and writes nothing.
        yield* Fiber.interrupt(second)
        assert.strictEqual(state.plain, 1)
        // The first's write was handed over: its interruption waits for the commit.
        const interrupting = yield* Effect.fork(Fiber.interrupt(first))
        yield* Effect.sleep("20 millis")
        assert.isTrue((yield* Fiber.poll(interrupting))._tag === "None")
        state.hold = false
        releaseAll()
        yield* Fiber.join(interrupting)
        // Committed and published despite the interrupt; the lock was released (the next append runs).
        const third = yield* tape.append(SESSION, [delta("third")])
        assert.strictEqual(third[0]!.tapeSeq, 2)
        const seen = Chunk.toReadonlyArray(yield* Fiber.join(live)) as ReadonlyArray<
          TapeEvent.TapeEvent & { text: string }
        >
        assert.deepStrictEqual(
          seen.map((e) => [e.tapeSeq, e.text]),
          [
            [1, "first"],
            [2, "third"]
          ]
        )
        assert.strictEqual(yield* journal.headSeq(SESSION), 2)
      })
  )

  it.live(
    "a journal failing every write at once fails 10,000 queued appends with its typed error, without recursion",
    () =>
      Effect.gen(function* () {
        const { journal, state, releaseAll } = yield* plainJournal
        const tape = yield* makeTape(journal)
        state.hold = true
        const first = yield* Effect.fork(tape.append(SESSION, [delta("first")]))
        yield* until(() => state.held.length === 1)
        const queued = yield* Effect.forEach(
          Array.from({ length: 10_000 }, (_, i) => i),
          (i) => Effect.fork(Effect.either(tape.append(SESSION, [delta(`q${i}`)]))),
          { concurrency: 1 }
        )
        yield* Effect.yieldNow()
        state.closed = true
        releaseAll()
        assert.strictEqual((yield* Fiber.join(first))[0]!.tapeSeq, 1)
        for (const f of queued) {
          const r = yield* Fiber.join(f)
          assert.isTrue(Either.isLeft(r) && r.left._tag === "JournalError")
        }
        // Every waiter was handed the lock and released it: a later write goes through.
        state.closed = false
        state.hold = false
        assert.strictEqual((yield* tape.append(SESSION, [delta("after")]))[0]!.tapeSeq, 2)
      })
  )
})
