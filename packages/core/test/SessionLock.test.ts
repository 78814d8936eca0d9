/**
 * The tape's per-session lock: a hand-over lock with a plain waiter queue. Mutual exclusion in
 * arrival order; a waiter interrupted while waiting leaves the queue; a waiter interrupted around
 * the moment it is handed the lock passes it on (the session never deadlocks); and concurrent
 * appends through the real tape stay gap-free and in order for a live subscriber.
 */
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Deferred, Effect, Fiber, Stream } from "effect"
import { MemoryJournal, Records, type TapeEvent } from "../src/index.js"
import { makeKeyedLock } from "../src/kernel/internal/sessionLock.js"
import { makeTape } from "../src/kernel/internal/tape.js"

const SESSION = "01KA0000000000000000000SES" as never
const RUN = "01KA0000000000000000000RUN" as never

describe("SessionLock", () => {
  it.live("one holder at a time, in arrival order, and the key is forgotten after", () =>
    Effect.gen(function* () {
      const lock = makeKeyedLock<string>()
      let inside = 0
      let most = 0
      const order: Array<number> = []
      const critical = (i: number) =>
        lock.withLock(
          "k",
          Effect.gen(function* () {
            inside++
            most = Math.max(most, inside)
            order.push(i)
            yield* Effect.yieldNow()
            yield* Effect.sleep("1 millis")
            inside--
          })
        )
      yield* Effect.forEach(
        Array.from({ length: 20 }, (_, i) => i),
        critical,
        { concurrency: "unbounded", discard: true }
      )
      assert.strictEqual(most, 1)
      assert.deepStrictEqual(
        order,
        Array.from({ length: 20 }, (_, i) => i)
      )
      assert.strictEqual(lock.size(), 0)
    })
  )

  it.effect(
    "withLockUninterruptible: the holder's work finishes despite an interrupt; a waiter still leaves on one",
    () =>
      Effect.gen(function* () {
        const lock = makeKeyedLock<string>()
        const holding = yield* Deferred.make<void>()
        const proceed = yield* Deferred.make<void>()
        let finished = false
        const holder = yield* Effect.fork(
          lock.withLockUninterruptible(
            "k",
            Effect.gen(function* () {
              yield* Deferred.succeed(holding, undefined)
              yield* Deferred.await(proceed)
              finished = true
            })
          )
        )
        yield* Deferred.await(holding)
        const waiter = yield* Effect.fork(lock.withLockUninterruptible("k", Effect.succeed("never")))
        yield* Effect.yieldNow()
        // The waiter is interruptible while it waits: it leaves the queue.
        yield* Fiber.interrupt(waiter)
        // The holder is not: the interrupt waits for its work, which completes, then the lock is free.
        const interrupting = yield* Effect.fork(Fiber.interrupt(holder))
        yield* Effect.yieldNow()
        assert.isFalse(finished)
        yield* Deferred.succeed(proceed, undefined)
        yield* Fiber.join(interrupting)
        assert.isTrue(finished)
        assert.strictEqual(lock.size(), 0)
        assert.strictEqual(yield* lock.withLockUninterruptible("k", Effect.succeed("free")), "free")
      })
  )

  it.effect("a failing or interrupted holder releases the lock", () =>
    Effect.gen(function* () {
      const lock = makeKeyedLock<string>()
      const failed = yield* Effect.flip(lock.withLock("k", Effect.fail("boom")))
      assert.strictEqual(failed, "boom")
      const holding = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(
        lock.withLock("k", Effect.zipRight(Deferred.succeed(holding, undefined), Effect.never))
      )
      yield* Deferred.await(holding)
      const waiter = yield* Effect.fork(lock.withLock("k", Effect.succeed("got it")))
      yield* Fiber.interrupt(holder)
      assert.strictEqual(yield* Fiber.join(waiter), "got it")
      assert.strictEqual(lock.size(), 0)
    })
  )

  it.effect("a waiter interrupted while waiting leaves the queue; the next one gets the lock", () =>
    Effect.gen(function* () {
      const lock = makeKeyedLock<string>()
      const release = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(lock.withLock("k", Deferred.await(release)))
      yield* Effect.yieldNow()
      const entered: Array<string> = []
      const quitter = yield* Effect.fork(
        lock.withLock(
          "k",
          Effect.sync(() => entered.push("quitter"))
        )
      )
      const patient = yield* Effect.fork(
        lock.withLock(
          "k",
          Effect.sync(() => entered.push("patient"))
        )
      )
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(quitter)
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(holder)
      yield* Fiber.join(patient)
      assert.deepStrictEqual(entered, ["patient"])
      assert.strictEqual(lock.size(), 0)
    })
  )

  it.live("a waiter interrupted as it is handed the lock passes it on: no deadlock, at any interleaving", () =>
    Effect.gen(function* () {
      for (let delay = 0; delay < 6; delay++) {
        const lock = makeKeyedLock<string>()
        const release = yield* Deferred.make<void>()
        const holder = yield* Effect.fork(lock.withLock("k", Deferred.await(release)))
        yield* Effect.yieldNow()
        const handedTo = yield* Effect.fork(lock.withLock("k", Effect.never))
        const next = yield* Effect.fork(lock.withLock("k", Effect.succeed("next ran")))
        yield* Effect.yieldNow()
        // Release the holder and interrupt the waiter it hands the lock to, `delay` scheduler
        // turns apart: 0 is the same synchronous step (the waiter granted but not yet resumed).
        yield* Effect.forkDaemon(
          Effect.zipRight(
            Deferred.succeed(release, undefined),
            Effect.zipRight(Effect.repeatN(Effect.yieldNow(), delay), Fiber.interruptFork(handedTo))
          )
        )
        if (delay === 0) yield* Fiber.interruptFork(handedTo)
        const outcome = yield* Fiber.join(next).pipe(Effect.timeout("2 seconds"))
        assert.strictEqual(outcome, "next ran", `delay ${delay}`)
        yield* Fiber.await(handedTo)
        yield* Fiber.join(holder)
        assert.strictEqual(lock.size(), 0, `delay ${delay}`)
      }
    })
  )

  it.effect("concurrent appends to one session through the tape are gap-free and in order for a subscriber", () =>
    Effect.gen(function* () {
      const journal = yield* MemoryJournal.make()
      yield* journal.createSession(Records.makeSession({ id: SESSION, principal: "alice" }))
      const tape = yield* makeTape(journal)
      const appends = 200
      const received = yield* Effect.fork(tape.subscribe(SESSION, 0).pipe(Stream.take(appends * 2), Stream.runCollect))
      yield* Effect.yieldNow()
      yield* Effect.forEach(
        Array.from({ length: appends }, (_, i) => i),
        (i) =>
          tape.append(SESSION, [
            { _tag: "TextDelta", sessionId: SESSION, runId: RUN, at: i, text: `a${i}` },
            { _tag: "TextDelta", sessionId: SESSION, runId: RUN, at: i, text: `b${i}` }
          ] as unknown as [TapeEvent.NewTapeEvent]),
        { concurrency: "unbounded", discard: true }
      )
      const events = Chunk.toReadonlyArray(yield* Fiber.join(received))
      assert.deepStrictEqual(
        events.map((e) => e.tapeSeq),
        Array.from({ length: appends * 2 }, (_, i) => i + 1)
      )
      // Each append's two events are adjacent: appends did not interleave.
      for (let i = 0; i < events.length; i += 2) {
        const a = events[i] as TapeEvent.TapeEvent & { text: string }
        const b = events[i + 1] as TapeEvent.TapeEvent & { text: string }
        assert.strictEqual(a.text.slice(1), b.text.slice(1))
      }
    })
  )
})
