/**
 * The follower a started run's `follow` opens (`Tape.follow`, on the scope with `Scope.addFinalizer`)
 * is detached when its scope closes — after the run's whole tape, and when the scope closes before the
 * follower was read at all — and a scope closed by a failure detaches it too (the
 * `palyra_tape_subscribers` gauge back at its baseline each time).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Metric, Scope } from "effect"
import { Caller, Gateway, Metrics, ScriptedModel } from "../src/index.js"
import { gatewayLayer, tags } from "../src/testing.js"
import { drain } from "./helpers.js"

const alice = Caller.user("alice")
const subscribers = Effect.map(Metric.value(Metrics.tapeSubscribers), (s) => s.value)
const model = ScriptedModel.make(() => ({ text: ["an", "swer"] }))

describe("a started run's follow", () => {
  it.live("is detached when its scope closes: read to the end, unread, or closed by a failure", () =>
    Effect.gen(function* () {
      const gateway = yield* Gateway.Gateway
      const baseline = yield* subscribers
      for (const how of ["read", "unread", "failed"] as const) {
        const started = yield* gateway.startRun(alice, { text: how, key: "k" })
        const scope = yield* Scope.make()
        const follower = yield* Scope.extend(started.follow, scope)
        assert.strictEqual(yield* subscribers, baseline + 1)
        if (how === "read") assert.strictEqual(tags(yield* drain(follower)).at(-1), "RunStateChanged")
        yield* Scope.close(scope, how === "failed" ? Exit.fail("gone") : Exit.void)
        assert.strictEqual(yield* subscribers, baseline, how)
        // Let the run end before the next message of the session.
        if (how !== "read") yield* Effect.scoped(Effect.flatMap(started.follow, drain))
      }
    }).pipe(Effect.provide(gatewayLayer({ model })))
  )
})
