/**
 * A run on an idle session is admitted and started in one commit. The journal is stopped at each
 * point of that start (the commit fails; the process dies right after it) and what is left must
 * be correct: nothing, and the session still takes messages; or a started run that the next
 * process resumes from its tape (or marks interrupted), with the same tape as a two-commit start.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Option } from "effect"
import { Caller, Errors, Gateway, Journal, MemoryJournal, ScriptedModel, type TapeEvent } from "../src/index.js"
import { gatewayLayer, tags } from "../src/testing.js"

const alice = Caller.user("alice")
const isStart = (events: ReadonlyArray<TapeEvent.NewTapeEvent>) => events.some((e) => e._tag === "UserMessage")
const broken = (method: string) => new Errors.JournalError({ method, message: "the disk went away" })

describe("a run start in one commit", () => {
  it.live("a start whose commit fails leaves no run; a run queued behind it meanwhile still runs", () =>
    Effect.gen(function* () {
      const inner = yield* MemoryJournal.make()
      const entered = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      const secondAdmitting = yield* Deferred.make<void>()
      let failed = 0
      // The first start commit waits until released, then fails (nothing stored).
      const journal: Journal.Service = {
        ...inner,
        // Admission reads the head after it chose to queue or start: the second one has chosen.
        headSeq: (sessionId) =>
          Effect.zipLeft(
            inner.headSeq(sessionId),
            failed === 1 ? Deferred.succeed(secondAdmitting, undefined) : Effect.void
          ),
        append: (sessionId, events, effects) =>
          failed === 0 && effects?.createRun !== undefined && isStart(events)
            ? Effect.gen(function* () {
                failed++
                yield* Deferred.succeed(entered, undefined)
                yield* Deferred.await(release)
                return yield* broken("append")
              })
            : inner.append(sessionId, events, effects)
      }
      const model = ScriptedModel.make([{ text: "second" }, { text: "third" }])
      const result = yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const session = yield* gateway.resolveSession(alice, { key: "k" })
        const first = yield* Effect.fork(gateway.sendMessage(alice, { text: "a", sessionId: session.id }))
        yield* Deferred.await(entered)
        // The session is claimed by the first: this one queues behind it (its append then waits
        // for the first's, which holds the session's tape).
        const admitting = yield* Effect.fork(gateway.sendMessage(alice, { text: "b", sessionId: session.id }))
        yield* Deferred.await(secondAdmitting)
        yield* Deferred.succeed(release, undefined)
        const firstExit = yield* Fiber.await(first)
        const second = yield* Fiber.join(admitting)
        assert.strictEqual(second.run.state, "Accepted")
        const secondDone = yield* gateway.awaitRun(alice, second.run.id)
        // And the session takes new messages afterwards (its claim is gone).
        const third = yield* gateway.sendMessage(alice, { text: "c", sessionId: session.id })
        const thirdDone = yield* gateway.awaitRun(alice, third.run.id)
        const runs = yield* gateway.listRuns(alice, { sessionId: session.id })
        const tape = yield* gateway.readTape(alice, session.id, { afterSeq: 0 })
        return { firstExit, secondDone, thirdDone, runs, tape }
      }).pipe(Effect.provide(gatewayLayer({ model, journal: Layer.succeed(Journal.Journal, journal) })), Effect.scoped)
      assert.strictEqual(result.firstExit._tag, "Failure")
      assert.deepStrictEqual([result.secondDone.state, result.thirdDone.state], ["Done", "Done"])
      assert.strictEqual(result.runs.length, 2)
      assert.deepStrictEqual(
        result.tape.filter((e) => e._tag === "UserMessage").map((e) => (e._tag === "UserMessage" ? e.text : "")),
        ["b", "c"]
      )
      assert.deepStrictEqual(
        result.tape.map((e) => e.tapeSeq),
        result.tape.map((_, i) => i + 1)
      )
    })
  )

  it.live("two first messages with one new key: one session, the loser's run re-admitted into it", () =>
    Effect.gen(function* () {
      const inner = yield* MemoryJournal.make()
      const entered = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      let creations = 0
      // The first start that creates the session waits (its session not stored yet) until released.
      const journal: Journal.Service = {
        ...inner,
        append: (sessionId, events, effects) =>
          effects?.createSession !== undefined && creations++ === 0
            ? Effect.zipRight(
                Effect.zipRight(Deferred.succeed(entered, undefined), Deferred.await(release)),
                inner.append(sessionId, events, effects)
              )
            : inner.append(sessionId, events, effects)
      }
      const model = ScriptedModel.make([{ text: "one" }, { text: "two" }])
      const out = yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const loser = yield* Effect.fork(gateway.sendMessage(alice, { text: "a", key: "k" }))
        yield* Deferred.await(entered)
        // The second finds no session either, creates it and wins.
        const winner = yield* gateway.sendMessage(alice, { text: "b", key: "k" })
        yield* Deferred.succeed(release, undefined)
        const lost = yield* Fiber.join(loser)
        const done = [yield* gateway.awaitRun(alice, winner.run.id), yield* gateway.awaitRun(alice, lost.run.id)]
        const sessions = yield* gateway.listSessions(alice)
        const tape = yield* gateway.readTape(alice, winner.session.id, { afterSeq: 0 })
        return { winner, lost, done, sessions, tape }
      }).pipe(Effect.provide(gatewayLayer({ model, journal: Layer.succeed(Journal.Journal, journal) })), Effect.scoped)
      assert.strictEqual(out.lost.session.id, out.winner.session.id)
      assert.strictEqual(out.sessions.length, 1)
      assert.deepStrictEqual(
        out.done.map((r) => r.state),
        ["Done", "Done"]
      )
      assert.strictEqual(creations, 2)
      assert.deepStrictEqual(
        out.tape.filter((e) => e._tag === "UserMessage").map((e) => (e._tag === "UserMessage" ? e.text : "")),
        ["b", "a"]
      )
      assert.deepStrictEqual(
        out.tape.map((e) => e.tapeSeq),
        out.tape.map((_, i) => i + 1)
      )
    })
  )

  for (const onInterruptedRuns of ["resume", "fail"] as const) {
    it.live(`a process that dies right after the start's commit: the next one ${onInterruptedRuns}s the run`, () =>
      Effect.gen(function* () {
        const inner = yield* MemoryJournal.make()
        // After the start's commit, every write fails: the journal holds exactly what that commit left.
        let committed = false
        const dying: Journal.Service = {
          ...inner,
          append: (sessionId, events, effects) =>
            committed
              ? Effect.fail(broken("append"))
              : Effect.tap(inner.append(sessionId, events, effects), () =>
                  Effect.sync(() => {
                    if (isStart(events)) committed = true
                  })
                )
        }
        const model = ScriptedModel.make([{ text: "lost" }])
        const started = yield* Effect.gen(function* () {
          const gateway = yield* Gateway.Gateway
          const { run } = yield* gateway.sendMessage(alice, { text: "hi", key: "k" })
          return run
        }).pipe(Effect.provide(gatewayLayer({ model, journal: Layer.succeed(Journal.Journal, dying) })), Effect.scoped)
        const left = yield* inner.getRun(started.id)
        assert.strictEqual(Option.map(left, (r) => r.state).pipe(Option.getOrUndefined), "InProgress")
        assert.deepStrictEqual(tags(yield* inner.readTape(started.sessionId, { afterSeq: 0 })), [
          "RunAccepted",
          "RunStateChanged",
          "UserMessage",
          "RunStateChanged"
        ])

        const next = ScriptedModel.make([{ text: "again" }])
        const { run, tape } = yield* Effect.gen(function* () {
          const gateway = yield* Gateway.Gateway
          const run = yield* gateway.awaitRun(alice, started.id)
          return { run, tape: yield* gateway.readTape(alice, started.sessionId, { afterSeq: 0 }) }
        }).pipe(
          Effect.provide(
            gatewayLayer({ model: next, journal: Layer.succeed(Journal.Journal, inner), onInterruptedRuns })
          ),
          Effect.scoped
        )
        // One start only, whatever happened next.
        assert.strictEqual(tags(tape).filter((t) => t === "UserMessage").length, 1)
        if (onInterruptedRuns === "resume") {
          assert.strictEqual(run.state, "Done")
          assert.strictEqual(next.prompts.length, 1)
          const answer = tape.find((e) => e._tag === "AssistantMessage")
          assert.strictEqual(answer?._tag === "AssistantMessage" ? answer.text : undefined, "again")
        } else {
          assert.strictEqual(run.state, "Failed")
          assert.strictEqual(run.error?.code, "interrupted")
          assert.strictEqual(next.prompts.length, 0)
        }
      })
    )
  }
})
