/**
 * `Gateway.startRunFollowing`'s `attached` hook: the follower is handed over as soon as it is
 * attached (before the start commit), so a transport can take the start commit's events inside their
 * publication — before the call returns; a start refused before it attaches never calls the hook; a
 * start whose commit fails calls it, but its follower is never woken with anything and is closed.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Layer, Metric, Scope } from "effect"
import type { Follower } from "../src/index.js"
import { Caller, Errors, Gateway, Journal, MemoryJournal, Metrics, type Records, ScriptedModel } from "../src/index.js"
import { gatewayLayer } from "../src/testing.js"

const alice = Caller.user("alice")
const subscribers = Effect.map(Metric.value(Metrics.tapeSubscribers), (s) => s.value)
const model = ScriptedModel.make(() => ({ text: ["ans", "wer"] }))

/** A memory journal whose start commit can be made to fail. */
const failing = Effect.gen(function* () {
  const inner = yield* MemoryJournal.make()
  const state = { failStart: false }
  const journal: Journal.Service = {
    ...inner,
    append: (sessionId, events, effects) =>
      state.failStart && effects?.createRun !== undefined
        ? Effect.fail(new Errors.JournalError({ method: "append", message: "the disk went away" }))
        : inner.append(sessionId, events, effects)
  }
  return { journal, state }
})

/** The hook: records its calls and what the follower's wake-ups take while the call has not returned. */
const recorder = () => {
  const calls: Array<Records.Run> = []
  const takenBeforeReturn: Array<string> = []
  const state = { returned: false }
  const attached = (follower: Follower.Follower, run: Records.Run) => {
    calls.push(run)
    const wake = () => {
      if (state.returned) return
      const ready = follower.take()
      if (ready === undefined) return follower.onReady(wake)
      if (Array.isArray(ready)) for (const e of ready) takenBeforeReturn.push(`${e.tapeSeq}:${e._tag}`)
    }
    follower.onReady(wake)
  }
  return { calls, takenBeforeReturn, state, attached }
}

describe("startRunFollowing's attached hook", () => {
  it.live(
    "hands the follower over before the commit: the start commit's events are taken before the call returns",
    () =>
      Effect.gen(function* () {
        const { journal } = yield* failing
        yield* Effect.gen(function* () {
          const gateway = yield* Gateway.Gateway
          const r = recorder()
          const scope = yield* Scope.make()
          const started = yield* Scope.extend(
            gateway.startRunFollowing(alice, { text: "hi", key: "k" }, { attached: r.attached }),
            scope
          )
          r.state.returned = true
          assert.strictEqual(r.calls.length, 1)
          assert.strictEqual(r.calls[0]?.id, started.run.id)
          assert.isAbove(r.takenBeforeReturn.length, 0)
          assert.include(r.takenBeforeReturn, `${started.run.startSeq}:RunAccepted`)
          yield* Scope.close(scope, Exit.void)
        }).pipe(Effect.provide(gatewayLayer({ model, journal: Layer.succeed(Journal.Journal, journal) })))
      })
  )

  it.live(
    "a start refused before it attaches never calls it; a failed commit leaves its follower unwoken and closed",
    () =>
      Effect.gen(function* () {
        const { journal, state } = yield* failing
        yield* Effect.gen(function* () {
          const gateway = yield* Gateway.Gateway
          const baseline = yield* subscribers
          const refused = recorder()
          const empty = yield* Effect.exit(
            Effect.scoped(gateway.startRunFollowing(alice, { text: "" }, { attached: refused.attached }))
          )
          assert.isTrue(Exit.isFailure(empty))
          assert.strictEqual(refused.calls.length, 0)
          state.failStart = true
          const failed = recorder()
          const exit = yield* Effect.exit(
            Effect.scoped(gateway.startRunFollowing(alice, { text: "hi" }, { attached: failed.attached }))
          )
          state.failStart = false
          assert.isTrue(Exit.isFailure(exit))
          assert.strictEqual(failed.calls.length, 1)
          assert.deepStrictEqual(failed.takenBeforeReturn, [])
          assert.strictEqual(yield* subscribers, baseline)
        }).pipe(Effect.provide(gatewayLayer({ model, journal: Layer.succeed(Journal.Journal, journal) })))
      })
  )
})
