/**
 * The scheduler's end of a run, driven directly (`makeScheduler` with a loop that ends at once):
 * the session is freed and its empty queue dropped in one step, so a message admitted the moment
 * the session is free — whenever the ending fiber yields — is always driven; a shutdown while a
 * run runs, or while its end waits for the check phase, still ends it (waiters answered, end hooks
 * run), claimed or queued; a cancel racing a run's own end leaves no cancel behind.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Option, Scope } from "effect"
import type { RunId, SessionId } from "../src/domain/Ids.js"
import type { Run } from "../src/domain/Records.js"
import type { RunState } from "../src/domain/RunState.js"
import { MemoryJournal } from "../src/index.js"
import { makeScheduler } from "../src/kernel/internal/scheduler.js"

const S = "s1" as SessionId
const r1 = "r1" as RunId
const r2 = "r2" as RunId

/** A journal whose `getRun` answers a run `r1` in the state `state()`. */
const journalWith = (state: () => RunState) =>
  Effect.map(MemoryJournal.make(), (inner) => ({
    ...inner,
    getRun: (id: RunId) =>
      Effect.succeed(
        Option.some<Run>({
          id,
          sessionId: S,
          principal: "alice",
          state: state(),
          input: "hi",
          startSeq: 1,
          error: null,
          createdAt: 0,
          updatedAt: 0
        })
      )
  }))

/** `r1` admitted as admission does: claimed and started on its own fiber, or queued for a worker. */
const admit = (scheduler: Effect.Effect.Success<ReturnType<typeof makeScheduler>>, path: "claimed" | "queued") => {
  if (path === "queued") return scheduler.enqueue(S, r1)
  assert.isTrue(scheduler.claim(S, r1))
  return scheduler.startClaimed(S)
}

describe("the scheduler's end of a run", () => {
  // Each budget makes the claimed run's ending fiber yield at another of its steps; at some of them
  // (10, 11, 17 among them when the queue was dropped a step after the session was freed) an
  // admission ran between the two and its run was queued where no worker would take it.
  for (const maxOps of [10, 11, 12, 13, 17, 18, 2048]) {
    it.live(`a message admitted as the claimed run frees the session is driven (yield every ${maxOps} ops)`, () =>
      Effect.gen(function* () {
        const driven: Array<RunId> = []
        const scheduler = yield* makeScheduler(yield* journalWith(() => "Done"), (runId) =>
          Effect.sync(() => void driven.push(runId))
        )
        assert.isTrue(scheduler.claim(S, r1))
        // The second message's admission: once the first run was driven and its session is free,
        // what admission does — claim it, else queue behind.
        const admission = Effect.gen(function* () {
          for (let n = 0; !driven.includes(r1) || scheduler.lastOf(S) !== undefined; n++) {
            if (n > 100_000) return yield* Effect.die("the session was never freed")
            yield* Effect.yieldNow()
          }
          if (scheduler.claim(S, r2)) yield* scheduler.startClaimed(S)
          else yield* scheduler.enqueue(S, r2)
        })
        const fiber = yield* Effect.fork(admission)
        yield* Effect.withMaxOpsBeforeYield(scheduler.startClaimed(S), maxOps)
        yield* Fiber.join(fiber)
        yield* scheduler.awaitEnd(r2).pipe(Effect.timeout("1 second"))
        for (let n = 0; driven.length < 2 && n < 200; n++) yield* Effect.sleep("5 millis")
        assert.deepStrictEqual(driven, [r1, r2])
      }).pipe(Effect.scoped)
    )
  }

  for (const path of ["claimed", "queued"] as const)
    it.live(`a shutdown while a ${path} run's end waits for the check phase still answers its waiter`, () =>
      Effect.gen(function* () {
        let state = "Accepted" as RunState
        const scope = yield* Scope.make()
        const scheduler = yield* Scope.extend(
          makeScheduler(yield* journalWith(() => state), () =>
            Effect.sync(() => {
              state = "Done"
            })
          ),
          scope
        )
        const waiter = yield* Effect.fork(scheduler.awaitEnd(r1))
        yield* Effect.yieldNow()
        yield* admit(scheduler, path)
        // The run ended and freed its session; the rest of its end waits for the check phase. Shut down now.
        while (state !== "Done" || scheduler.lastOf(S) !== undefined) yield* Effect.yieldNow()
        yield* Scope.close(scope, Exit.void)
        const answered = yield* Fiber.join(waiter).pipe(Effect.timeout("1 second"), Effect.option)
        assert.isTrue(Option.isSome(answered), "the waiter was never answered")
      })
    )
  for (const path of ["claimed", "queued"] as const)
    it.live(`a shutdown while a ${path} run is running still ends it: its waiter answered, its end hooks run`, () =>
      Effect.gen(function* () {
        const states = new Map<RunId, RunState>()
        const scope = yield* Scope.make()
        let started = false
        const scheduler = yield* Scope.extend(
          makeScheduler(
            yield* journalWith(() => states.get(r1) ?? "Accepted"),
            // A loop that runs until interrupted, then records the run's end (as the real loop
            // parks or cancels it).
            (runId) =>
              Effect.sync(() => {
                started = true
              }).pipe(
                Effect.zipRight(Effect.never),
                Effect.onInterrupt(() => Effect.sync(() => states.set(runId, "Cancelled")))
              )
          ),
          scope
        )
        let hookRan = false
        scheduler.onEnd(r1, () => {
          hookRan = true
        })
        const waiter = yield* Effect.fork(scheduler.awaitEnd(r1))
        yield* Effect.yieldNow()
        yield* admit(scheduler, path)
        while (!started) yield* Effect.yieldNow()
        yield* Scope.close(scope, Exit.void)
        const answered = yield* Fiber.join(waiter).pipe(Effect.timeout("1 second"), Effect.option)
        assert.isTrue(hookRan, "the run's end hooks never ran")
        assert.isTrue(Option.isSome(answered), "the waiter was never answered")
      })
    )

  // A canceller polling `interrupt` while the claimed run ends by itself, with yields moved through
  // both fibers: an `interrupt` that read the run as not finishing must not leave its cancel behind.
  for (const [a, b] of [
    [10, 10],
    [12, 13],
    [12, 14],
    [12, 15],
    [11, 12],
    [13, 16],
    [2048, 2048]
  ] as const)
    it.live(`a cancel racing the claimed run's own end leaves no cancel behind (yields ${a}/${b})`, () =>
      Effect.gen(function* () {
        let state = "InProgress" as RunState
        let over = false
        const scheduler = yield* makeScheduler(yield* journalWith(() => state), () =>
          Effect.sync(() => {
            state = "Done"
          })
        )
        assert.isTrue(scheduler.claim(S, r1))
        const canceller = yield* Effect.fork(
          Effect.withMaxOpsBeforeYield(
            Effect.gen(function* () {
              for (let n = 0; n < 2000 && !over; n++) {
                yield* scheduler.interrupt(r1, "bob")
                yield* Effect.yieldNow()
              }
            }),
            a
          )
        )
        yield* Effect.withMaxOpsBeforeYield(scheduler.startClaimed(S), b)
        yield* scheduler.awaitEnd(r1).pipe(Effect.timeout("1 second"))
        for (let n = 0; n < 50; n++) yield* Effect.yieldNow()
        yield* Effect.sleep("5 millis")
        over = true
        yield* Fiber.join(canceller)
        assert.isTrue(scheduler.claim(S, r2), "the session was left busy")
        assert.strictEqual(scheduler.cancelledBy(r1), undefined, "a cancel was left behind")
      }).pipe(Effect.scoped)
    )
  for (const path of ["claimed", "queued"] as const)
    it.live(`a cancel while a ${path} run's end runs finds it ended and leaves no cancel behind`, () =>
      Effect.gen(function* () {
        let state = "InProgress" as RunState
        const scheduler = yield* makeScheduler(yield* journalWith(() => state), () =>
          Effect.sync(() => {
            state = "Done"
          })
        )
        const target = path === "claimed" ? r1 : r2
        const ending = yield* Deferred.make<void>()
        scheduler.onEnd(target, () => Deferred.unsafeDone(ending, Effect.void))
        assert.isTrue(scheduler.claim(S, r1))
        if (path === "queued") yield* scheduler.enqueue(S, r2)
        yield* scheduler.startClaimed(S)
        // Its end hooks ran: the loop is over and the end waits for the check phase. A client's cancel
        // arrives now, and is dropped while it waits (the client gone, a timeout).
        yield* Deferred.await(ending)
        const cancel = yield* Effect.fork(scheduler.interrupt(target, "bob"))
        yield* Effect.yieldNow()
        const answered = cancel.unsafePoll()
        yield* Fiber.interrupt(cancel)
        yield* scheduler.awaitEnd(target).pipe(Effect.timeout("1 second"))
        assert.isFalse(answered !== null && Exit.isSuccess(answered) && answered.value, "a cancel took an ended run")
        assert.isUndefined(scheduler.cancelledBy(target), "a cancel was left behind for an ended run")
      }).pipe(Effect.scoped)
    )
  it.live("onEnd for a run already ended calls back at once; for a running one, at its end", () =>
    Effect.gen(function* () {
      const gate = yield* Deferred.make<void>()
      const scheduler = yield* makeScheduler(yield* journalWith(() => "Done"), (runId) =>
        runId === r2 ? Deferred.await(gate) : Effect.void
      )
      assert.isTrue(scheduler.claim(S, r1))
      yield* scheduler.startClaimed(S)
      yield* scheduler.awaitEnd(r1).pipe(Effect.timeout("1 second"))
      const calls: Array<RunId> = []
      // r1 ended before anyone registered: its callback (an approval hold's release) runs now.
      scheduler.onEnd(r1, () => calls.push(r1))
      assert.deepStrictEqual(calls, [r1])
      // r2 is running: its callback waits for its end.
      assert.isTrue(scheduler.claim(S, r2))
      yield* scheduler.startClaimed(S)
      scheduler.onEnd(r2, () => calls.push(r2))
      assert.deepStrictEqual(calls, [r1])
      yield* Deferred.succeed(gate, undefined)
      yield* scheduler.awaitEnd(r2).pipe(Effect.timeout("1 second"))
      assert.deepStrictEqual(calls, [r1, r2])
    }).pipe(Effect.scoped)
  )
  it.live("onEnd for a run a cancel took and its worker skipped waits: the run may be given back and driven", () =>
    Effect.gen(function* () {
      const gate = yield* Deferred.make<void>()
      const driven: Array<RunId> = []
      const scheduler = yield* makeScheduler(yield* journalWith(() => "Done"), (runId) =>
        Effect.zipRight(
          Effect.sync(() => void driven.push(runId)),
          Deferred.await(gate)
        )
      )
      assert.isTrue(scheduler.claim(S, r1))
      // Admission forked the run's fiber; a cancel takes the run before that fiber's first step.
      yield* scheduler.startClaimed(S)
      assert.isTrue(scheduler.takeClaimed(r1))
      for (let n = 0; scheduler.lastOf(S) !== undefined; n++) {
        if (n > 10_000) return yield* Effect.die("the worker never skipped the taken run")
        yield* Effect.yieldNow()
      }
      const calls: Array<RunId> = []
      scheduler.onEnd(r1, () => calls.push(r1))
      // The cancel's commit failed: the run is given back, and driven.
      yield* scheduler.untake(S, r1)
      for (let n = 0; !driven.includes(r1); n++) {
        if (n > 10_000) return yield* Effect.die("the run was never driven")
        yield* Effect.yieldNow()
      }
      assert.deepStrictEqual(calls, [], "the callback ran while the run was live")
      yield* Deferred.succeed(gate, undefined)
      yield* scheduler.awaitEnd(r1).pipe(Effect.timeout("1 second"))
      assert.deepStrictEqual(calls, [r1])
    }).pipe(Effect.scoped)
  )
})
