/**
 * Unit-testing an agent with @palyra/core/testing: a scripted model (it records every prompt), the
 * real in-memory journal, the real policy engine, and TestClock for approval expiry.
 */

import { assert, describe, it } from "@effect/vitest"
import { Caller, Gateway } from "@palyra/core"
import { collect, gatewayLayer, ScriptedModel } from "@palyra/core/testing"
import { Effect, Fiber, TestClock } from "effect"
import { instructions, refunds, refundTool } from "../agent.js"

const script = () =>
  ScriptedModel.make([
    { toolCalls: [{ name: "orders.refund", args: { orderId: "A-1", cents: 1250 } }] },
    { text: "Refunded 12.50." }
  ])

describe("refund agent", () => {
  it.effect("refunds only after a human approves", () => {
    const model = script()
    return Effect.gen(function* () {
      refunds.length = 0
      const gateway = yield* Gateway.Gateway
      const { run, events } = yield* gateway.startRun(Caller.user("support"), { text: "refund A-1" })
      const fiber = yield* Effect.fork(collect(events))
      const [approval] = yield* gateway
        .listApprovals(Caller.operator("op"), { runId: run.id, status: "pending" })
        .pipe(Effect.repeat({ until: (l) => l.length > 0 }))
      assert.deepStrictEqual(refunds, [])
      yield* gateway.resolveApproval(Caller.operator("lead"), { approvalId: approval!.id, decision: "approve" })
      const tape = yield* Fiber.join(fiber)
      assert.deepStrictEqual(refunds, [{ orderId: "A-1", cents: 1250 }])
      const last = tape.at(-1)
      assert.strictEqual(last?._tag === "RunStateChanged" ? last.to : undefined, "Done")
      assert.strictEqual(model.prompts.length, 2)
      assert.strictEqual(model.prompts[0]!.tools[0]!.name, "orders.refund")
    }).pipe(Effect.provide(gatewayLayer({ model, tools: [refundTool], instructions })))
  })

  it.effect("no refund when nobody answers within the approval timeout", () => {
    const model = script()
    return Effect.gen(function* () {
      refunds.length = 0
      const gateway = yield* Gateway.Gateway
      const { events } = yield* gateway.startRun(Caller.user("support"), { text: "refund A-1" })
      const fiber = yield* Effect.fork(collect(events))
      yield* TestClock.adjust("16 minutes")
      const tape = yield* Fiber.join(fiber)
      assert.deepStrictEqual(refunds, [])
      const result = tape.find((e) => e._tag === "ToolResult")
      assert.strictEqual(result?._tag === "ToolResult" && result.status, "denied")
      // The model was told, and saw our instructions.
      assert.strictEqual(model.prompts[1]!.instructions, instructions)
      assert.strictEqual(model.prompts[1]!.messages.at(-1)!.role, "tool")
    }).pipe(Effect.provide(gatewayLayer({ model, tools: [refundTool], instructions, approvalTimeout: "15 minutes" })))
  })
})
