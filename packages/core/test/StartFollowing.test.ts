/**
 * `Gateway.startRunFollowing`: the run's follower is attached once the caller is authorized and
 * before the run's first commit, so its events reach it by their publication (nothing read back from
 * the journal); a caller who may not start the run gets nothing attached; a refused or failed start
 * leaves no subscriber behind (the `palyra_tape_subscribers` gauge); closing the scope detaches it.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Layer, Metric, Scope } from "effect"
import { Caller, Errors, Gateway, Journal, MemoryJournal, Metrics, ScriptedModel } from "../src/index.js"
import { gapFree, gatewayLayer, tags } from "../src/testing.js"
import { drain } from "./helpers.js"

const alice = Caller.user("alice")
const bob = Caller.user("bob")
const subscribers = Effect.map(Metric.value(Metrics.tapeSubscribers), (s) => s.value)

/** A memory journal whose `readTape` calls are counted and whose start commit can be made to fail. */
const counted = Effect.gen(function* () {
  const inner = yield* MemoryJournal.make()
  const state = { reads: 0, failStart: false }
  const journal: Journal.Service = {
    ...inner,
    readTape: (sessionId, options) =>
      Effect.suspend(() => {
        state.reads++
        return inner.readTape(sessionId, options)
      }),
    append: (sessionId, events, effects) =>
      state.failStart && effects?.createRun !== undefined
        ? Effect.fail(new Errors.JournalError({ method: "append", message: "the disk went away" }))
        : inner.append(sessionId, events, effects)
  }
  return { journal, state }
})

const model = ScriptedModel.make((_, i) => ({ text: ["ans", "wer ", `${i}`] }))

describe("startRunFollowing", () => {
  it.live("delivers the run's whole tape by publication, gap-free, and nothing is read back", () =>
    Effect.gen(function* () {
      const { journal, state } = yield* counted
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const baseline = yield* subscribers
        for (const text of ["one", "two"]) {
          const scope = yield* Scope.make()
          const before = state.reads
          const { follower, run, session } = yield* Scope.extend(
            gateway.startRunFollowing(alice, { text, key: "k" }),
            scope
          )
          assert.strictEqual(yield* subscribers, baseline + 1)
          const seen = yield* drain(follower)
          // Nothing read back: neither the follower nor (the start commit handed over) the loop.
          assert.strictEqual(state.reads - before, 0)
          assert.deepStrictEqual(tags(seen), [
            "RunAccepted",
            "RunStateChanged",
            "UserMessage",
            "RunStateChanged",
            "ModelRequest",
            "AssistantDelta",
            "AssistantMessage",
            "RunStateChanged"
          ])
          assert.isUndefined(gapFree(seen, run.startSeq))
          // Exactly what the journal stored for the run.
          const stored = yield* gateway.readTape(alice, session.id, { afterSeq: run.startSeq - 1 })
          assert.deepStrictEqual(
            seen,
            stored.filter((e) => e.runId === run.id)
          )
          yield* Scope.close(scope, Exit.void)
          assert.strictEqual(yield* subscribers, baseline)
        }
      }).pipe(Effect.provide(gatewayLayer({ model, journal: Layer.succeed(Journal.Journal, journal) })))
    })
  )

  it.live("a caller who may not start the run gets nothing attached: another's session answers NotFound", () =>
    Effect.gen(function* () {
      const { journal } = yield* counted
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const session = yield* gateway.resolveSession(alice, { key: "k" })
        const baseline = yield* subscribers
        const refused = yield* Effect.flip(
          Effect.scoped(gateway.startRunFollowing(bob, { text: "let me in", sessionId: session.id }))
        )
        assert.strictEqual(refused._tag, "NotFound")
        assert.strictEqual(yield* subscribers, baseline)
        assert.deepStrictEqual(yield* gateway.listRuns(alice, { sessionId: session.id }), [])
        // An archived session is refused too, with nothing attached.
        yield* gateway.archiveSession(alice, session.id)
        const archived = yield* Effect.flip(
          Effect.scoped(gateway.startRunFollowing(alice, { text: "hi", sessionId: session.id }))
        )
        assert.strictEqual(archived._tag, "Conflict")
        assert.strictEqual(yield* subscribers, baseline)
      }).pipe(Effect.provide(gatewayLayer({ model, journal: Layer.succeed(Journal.Journal, journal) })))
    })
  )

  it.live("a start whose commit fails detaches the follower it attached; the session takes the next message", () =>
    Effect.gen(function* () {
      const { journal, state } = yield* counted
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const session = yield* gateway.resolveSession(alice, { key: "k" })
        const baseline = yield* subscribers
        state.failStart = true
        const failed = yield* Effect.flip(
          Effect.scoped(gateway.startRunFollowing(alice, { text: "lost", sessionId: session.id }))
        )
        assert.strictEqual(failed._tag, "JournalError")
        assert.strictEqual(yield* subscribers, baseline)
        state.failStart = false
        const seen = yield* Effect.scoped(
          Effect.flatMap(gateway.startRunFollowing(alice, { text: "again", sessionId: session.id }), (r) =>
            drain(r.follower)
          )
        )
        assert.strictEqual(seen.at(-1)?._tag, "RunStateChanged")
        assert.strictEqual(yield* subscribers, baseline)
      }).pipe(Effect.provide(gatewayLayer({ model, journal: Layer.succeed(Journal.Journal, journal) })))
    })
  )

  it.live("a run queued behind another is followed from its admission to its end", () =>
    Effect.gen(function* () {
      const slow = ScriptedModel.make((request) =>
        request.messages.at(-1)?.role === "user" && (request.messages.at(-1) as { text: string }).text === "first"
          ? { text: ["a", "b"], delayPerDelta: "100 millis" }
          : { text: "second answer" }
      )
      const { journal } = yield* counted
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const first = yield* gateway.sendMessage(alice, { text: "first", key: "q" })
        const seen = yield* Effect.scoped(
          Effect.flatMap(gateway.startRunFollowing(alice, { text: "second", key: "q" }), (r) =>
            Effect.map(drain(r.follower), (events) => ({ events, run: r.run }))
          )
        )
        assert.strictEqual(seen.events[0]?._tag, "RunAccepted")
        assert.strictEqual((seen.events[0] as { queuedBehind: unknown }).queuedBehind, first.run.id)
        assert.isTrue(seen.events.every((e) => e.runId === seen.run.id))
        const stored = yield* gateway.readTape(alice, first.session.id, { afterSeq: 0 })
        assert.deepStrictEqual(
          seen.events,
          stored.filter((e) => e.runId === seen.run.id)
        )
      }).pipe(Effect.provide(gatewayLayer({ model: slow, journal: Layer.succeed(Journal.Journal, journal) })))
    })
  )

  it.live("two first messages with one new key: the loser re-admits into the winner's session, re-attached", () =>
    Effect.gen(function* () {
      const inner = yield* MemoryJournal.make()
      // Both admissions look the key up before either commits: both describe a new session, one
      // commit wins, the other fails with Conflict and re-admits into the winner's session.
      const bothLooked = yield* Deferred.make<void>()
      let looked = 0
      const journal: Journal.Service = {
        ...inner,
        findSessionByKey: (principal, key) =>
          Effect.zipLeft(
            inner.findSessionByKey(principal, key),
            Effect.suspend(() => {
              if (looked >= 2) return Effect.void
              looked++
              return looked === 2 ? Deferred.succeed(bothLooked, undefined) : Deferred.await(bothLooked)
            })
          )
      }
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const baseline = yield* subscribers
        const follow = (text: string) =>
          Effect.scoped(
            Effect.flatMap(gateway.startRunFollowing(alice, { text, key: "new" }), (r) =>
              Effect.map(drain(r.follower), (events) => ({ events, run: r.run, session: r.session }))
            )
          )
        const [a, b] = yield* Effect.all([follow("a"), follow("b")], { concurrency: 2 })
        assert.strictEqual(a.session.id, b.session.id)
        assert.notStrictEqual(a.run.id, b.run.id)
        const stored = yield* gateway.readTape(alice, a.session.id, { afterSeq: 0 })
        for (const r of [a, b]) {
          assert.deepStrictEqual(
            r.events,
            stored.filter((e) => e.runId === r.run.id)
          )
          assert.strictEqual(r.events.at(-1)?._tag, "RunStateChanged")
        }
        assert.strictEqual(yield* subscribers, baseline)
      }).pipe(Effect.provide(gatewayLayer({ model, journal: Layer.succeed(Journal.Journal, journal) })))
    })
  )
})
