import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { Caller, ScriptedModel } from "../src/index.js"
import { withGateway } from "./helpers.js"

describe("Gateway.listRuns", () => {
  it.effect("a principal's page holds its own runs however many older runs others have", () =>
    Effect.gen(function* () {
      const model = ScriptedModel.make(() => ({ text: "ok" }))
      yield* withGateway({ model }, (gateway) =>
        Effect.gen(function* () {
          const alice = Caller.user("alice")
          const bob = Caller.user("bob")
          for (let i = 0; i < 5; i++) yield* gateway.startRun(bob, { key: "b", text: `bob ${i}` })
          const mine = yield* gateway.startRun(alice, { key: "a", text: "alice" })
          // The journal lists oldest first: bob's five runs come before alice's.
          assert.deepStrictEqual(
            (yield* gateway.listRuns(alice, { limit: 2 })).map((r) => r.id),
            [mine.run.id]
          )
          assert.strictEqual((yield* gateway.listRuns(bob, { limit: 3 })).length, 3)
          assert.isTrue((yield* gateway.listRuns(bob, {})).every((r) => r.principal === "bob"))
          // Operators see everyone's, or one principal's when they ask.
          assert.strictEqual((yield* gateway.listRuns(Caller.operator("op"), {})).length, 6)
          assert.deepStrictEqual(
            (yield* gateway.listRuns(Caller.operator("op"), { principal: "alice" })).map((r) => r.id),
            [mine.run.id]
          )
        })
      )
    })
  )
})
