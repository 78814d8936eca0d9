/**
 * A run on an idle session is admitted and started in one commit; its worker picks it up later.
 * A cancel at each point between that commit and the run's first model call must end the run
 * `Cancelled` with nothing written after it and no model call; an admitting caller interrupted
 * before its commit leaves nothing behind. Every point is reached by a deterministic signal: the
 * journal's own calls, and a scheduler that holds the run's worker back until the test lets it go.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Option, Scheduler } from "effect"
import type { RunId, SessionId } from "../src/domain/Ids.js"
import { Caller, Errors, Gateway, Journal, MemoryJournal, ScriptedModel, type TapeEvent } from "../src/index.js"
import { gatewayLayer, tags } from "../src/testing.js"

const alice = Caller.user("alice")
const isStart = (events: ReadonlyArray<TapeEvent.NewTapeEvent>) => events.some((e) => e._tag === "UserMessage")
const isCancel = (events: ReadonlyArray<TapeEvent.NewTapeEvent>) =>
  events.some((e) => e._tag === "RunStateChanged" && e.to === "Cancelled")
const startTags = ["RunAccepted", "RunStateChanged", "UserMessage", "RunStateChanged"]

/**
 * The default scheduler, except that while held it keeps the tasks it is given (a forked fiber's
 * first run among them) until `runHeld` runs them, synchronously, on the caller's stack.
 */
const holdingScheduler = () => {
  let holding = false
  const held: Array<Scheduler.Task> = []
  const scheduler: Scheduler.Scheduler = {
    shouldYield: (fiber) => (holding ? false : Scheduler.defaultScheduler.shouldYield(fiber)),
    scheduleTask: (task, priority, fiber) => {
      if (holding) held.push(task)
      else Scheduler.defaultScheduler.scheduleTask(task, priority, fiber)
    }
  }
  return {
    scheduler,
    hold: () => {
      holding = true
    },
    runHeld: () => {
      holding = false
      for (const task of held.splice(0)) task()
    }
  }
}

/** The first run's tape ends with its cancellation; the session's next run is answered normally. */
const checkCancelled = (
  gateway: Gateway.Service,
  model: ScriptedModel.ScriptedModel,
  sessionId: SessionId,
  runId: RunId
) =>
  Effect.gen(function* () {
    const cancelled = yield* gateway.awaitRun(alice, runId)
    // The session takes the next message: its answer is the model's first and only call.
    const next = yield* gateway.sendMessage(alice, { text: "b", sessionId })
    const done = yield* gateway.awaitRun(alice, next.run.id)
    const tape = yield* gateway.readTape(alice, sessionId, { afterSeq: 0 })
    const first = tape.filter((e) => e.runId === runId)
    assert.strictEqual(cancelled.state, "Cancelled")
    assert.strictEqual(done.state, "Done")
    assert.deepStrictEqual(tags(first), [...startTags, "RunStateChanged"])
    const last = first.at(-1)
    assert.deepStrictEqual(last?._tag === "RunStateChanged" ? [last.from, last.to] : [], ["InProgress", "Cancelled"])
    // The model answered the next run only.
    assert.strictEqual(model.prompts.length, 1)
    assert.deepStrictEqual(
      tape.map((e) => e.tapeSeq),
      tape.map((_, i) => i + 1)
    )
  })

describe("cancelling a run admitted with its start", () => {
  for (const point of ["before its worker picks it up", "while its worker picks it up"] as const) {
    it.live(`a cancel ${point}: Cancelled, nothing else written, no model call`, () =>
      Effect.gen(function* () {
        const inner = yield* MemoryJournal.make()
        const worker = holdingScheduler()
        const journal: Journal.Service = {
          ...inner,
          append: (sessionId, events, effects) =>
            Effect.gen(function* () {
              // The cancel's own commit is under way: the held worker runs now and picks runs up.
              if (point === "while its worker picks it up" && isCancel(events)) worker.runHeld()
              const stored = yield* inner.append(sessionId, events, effects)
              // The start is committed: hold the worker the admission forks next.
              if (effects?.createRun !== undefined && isStart(events)) worker.hold()
              return stored
            })
        }
        const model = ScriptedModel.make([{ text: "only b is answered" }])
        yield* Effect.gen(function* () {
          const gateway = yield* Gateway.Gateway
          const session = yield* gateway.resolveSession(alice, { key: "k" })
          const { run } = yield* gateway
            .sendMessage(alice, { text: "a", sessionId: session.id })
            .pipe(Effect.withScheduler(worker.scheduler))
          assert.strictEqual(model.prompts.length, 0)
          const after = yield* gateway.cancelRun(alice, run.id)
          assert.strictEqual(after.state, "Cancelled")
          worker.runHeld()
          yield* checkCancelled(gateway, model, session.id, run.id)
        }).pipe(
          Effect.provide(gatewayLayer({ model, journal: Layer.succeed(Journal.Journal, journal) })),
          Effect.scoped
        )
      })
    )
  }

  it.live("a cancel while the run's loop reads its history: Cancelled, no model call", () =>
    Effect.gen(function* () {
      const inner = yield* MemoryJournal.make()
      const reading = yield* Deferred.make<void>()
      const never = yield* Deferred.make<void>()
      let started = false
      // Armed by the first run's start only (the session's next run, claimed at once now that the
      // first run's fiber ends its turn itself, must not hang).
      let armed = false
      const hangOnce = <A, E>(read: Effect.Effect<A, E>): Effect.Effect<A, E> => {
        if (!started) return read
        started = false
        return Deferred.succeed(reading, undefined).pipe(Effect.zipRight(Deferred.await(never)), Effect.zipRight(read))
      }
      const journal: Journal.Service = {
        ...inner,
        append: (sessionId, events, effects) =>
          Effect.tap(inner.append(sessionId, events, effects), () =>
            Effect.sync(() => {
              if (!armed && effects?.createRun !== undefined && isStart(events)) started = armed = true
            })
          ),
        // The first history read after the start is the run's loop, in its prologue: it hangs. (The
        // history cache holds the start commit, so the loop reads only the session's head.)
        readTape: (sessionId, options) => hangOnce(inner.readTape(sessionId, options)),
        headSeq: (sessionId) => hangOnce(inner.headSeq(sessionId))
      }
      const model = ScriptedModel.make([{ text: "only b is answered" }])
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const session = yield* gateway.resolveSession(alice, { key: "k" })
        const { run } = yield* gateway.sendMessage(alice, { text: "a", sessionId: session.id })
        yield* Deferred.await(reading)
        const after = yield* gateway.cancelRun(alice, run.id)
        assert.strictEqual(after.state, "Cancelled")
        yield* checkCancelled(gateway, model, session.id, run.id)
      }).pipe(Effect.provide(gatewayLayer({ model, journal: Layer.succeed(Journal.Journal, journal) })), Effect.scoped)
    })
  )

  it.live("an admission interrupted before its commit leaves nothing; the session takes the next message", () =>
    Effect.gen(function* () {
      const inner = yield* MemoryJournal.make()
      const reading = yield* Deferred.make<void>()
      const never = yield* Deferred.make<void>()
      let hang = false
      const journal: Journal.Service = {
        ...inner,
        // Admission reads the session's head right before its commit: it hangs there once.
        headSeq: (sessionId) =>
          hang
            ? Effect.zipRight(
                Effect.sync(() => {
                  hang = false
                }),
                Effect.zipRight(Deferred.succeed(reading, undefined), Deferred.await(never))
              ).pipe(Effect.zipRight(inner.headSeq(sessionId)))
            : inner.headSeq(sessionId)
      }
      const model = ScriptedModel.make([{ text: "b's answer" }])
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const session = yield* gateway.resolveSession(alice, { key: "k" })
        hang = true
        const admitting = yield* Effect.fork(gateway.sendMessage(alice, { text: "a", sessionId: session.id }))
        yield* Deferred.await(reading)
        yield* Fiber.interrupt(admitting)
        assert.deepStrictEqual(yield* gateway.listRuns(alice, { sessionId: session.id }), [])
        const next = yield* gateway.sendMessage(alice, { text: "b", sessionId: session.id })
        const done = yield* gateway.awaitRun(alice, next.run.id)
        assert.strictEqual(done.state, "Done")
        assert.deepStrictEqual(tags(yield* gateway.readTape(alice, session.id, { afterSeq: 0 })), [
          ...startTags,
          "ModelRequest",
          "AssistantDelta",
          "AssistantMessage",
          "RunStateChanged"
        ])
        assert.strictEqual(Option.isSome(yield* inner.getRun(next.run.id)), true)
      }).pipe(Effect.provide(gatewayLayer({ model, journal: Layer.succeed(Journal.Journal, journal) })), Effect.scoped)
    })
  )
})

describe("a cancellation of a claimed run that does not commit", () => {
  it.live("gives the run back: the cancel fails, the run is driven to its end", () =>
    Effect.gen(function* () {
      const inner = yield* MemoryJournal.make()
      const worker = holdingScheduler()
      let refused = 0
      const journal: Journal.Service = {
        ...inner,
        append: (sessionId, events, effects) =>
          Effect.suspend(() => {
            // The cancel's commit fails once (nothing stored).
            if (isCancel(events) && refused++ === 0) {
              return Effect.fail(new Errors.JournalError({ method: "append", message: "the disk went away" }))
            }
            return Effect.tap(inner.append(sessionId, events, effects), () =>
              Effect.sync(() => {
                if (effects?.createRun !== undefined && isStart(events)) worker.hold()
              })
            )
          })
      }
      const model = ScriptedModel.make([{ text: "answered" }])
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const { run } = yield* gateway
          .sendMessage(alice, { text: "a", key: "k" })
          .pipe(Effect.withScheduler(worker.scheduler))
        const cancel = yield* Effect.flip(gateway.cancelRun(alice, run.id))
        assert.strictEqual(cancel._tag, "JournalError")
        worker.runHeld()
        const done = yield* gateway.awaitRun(alice, run.id).pipe(Effect.timeout("10 seconds"))
        assert.strictEqual(done.state, "Done")
        assert.strictEqual(model.prompts.length, 1)
        const tape = yield* gateway.readTape(alice, run.sessionId, { afterSeq: 0 })
        assert.deepStrictEqual(
          tape.map((e) => e.tapeSeq),
          tape.map((_, i) => i + 1)
        )
      }).pipe(Effect.provide(gatewayLayer({ model, journal: Layer.succeed(Journal.Journal, journal) })), Effect.scoped)
    })
  )
})
