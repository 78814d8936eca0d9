/**
 * `context.agent` in every Cedar request: one policy that names an agent lets that agent's sessions
 * use a tool the other agent's sessions may not (real Cedar, real Gateway, scripted models).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, type Layer } from "effect"
import { CedarPolicy } from "../src/cedar.js"
import { Caller, Gateway, PolicyEngine, ScriptedModel, type TapeEvent } from "../src/index.js"
import { gatewayLayer } from "../src/testing.js"
import { recordingTool } from "./helpers.js"

const op = Caller.operator("op")
const alice = Caller.user("alice")

const policies = `${CedarPolicy.defaultPolicies}
@id("support-may-refund")
@reason("the support agent issues refunds")
permit (principal, action == Palyra::Action::"tool.execute", resource == Palyra::Tool::"crm.refund")
when { context.agent == "support" };
`

/** A model that calls the refund tool once, then answers. */
const refunder = (name: string) =>
  ScriptedModel.make(
    (request) =>
      request.messages.at(-1)?.role === "tool"
        ? { text: "done" }
        : { toolCalls: [{ name: "crm.refund", args: { x: 5 } }] },
    { name }
  )

describe("Cedar: context.agent", () => {
  it.effect("a policy on context.agent permits the tool for one agent; the other agent is denied", () =>
    Effect.gen(function* () {
      const refund = recordingTool("crm.refund", "sensitive")
      const layer = gatewayLayer({
        model: refunder("kernel"),
        tools: [refund.tool],
        policy: CedarPolicy.layer({ policies }),
        agents: [
          { id: "support", model: refunder("support-model") },
          { id: "sales", model: refunder("sales-model") }
        ]
      }) as Layer.Layer<Gateway.Gateway | PolicyEngine.PolicyEngine>
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const decisions = (events: ReadonlyArray<TapeEvent.TapeEvent>) =>
          events.flatMap((e) => (e._tag === "PolicyDecided" ? [[e.decision, ...e.policyIds]] : []))

        const support = yield* gateway.sendMessage(alice, { text: "refund order 5", agent: "support" })
        yield* gateway.awaitRun(op, support.run.id)
        const supportTape = yield* gateway.readTape(op, support.session.id, { afterSeq: 0 })
        assert.deepStrictEqual(decisions(supportTape), [["allow", "support-may-refund"]])
        assert.deepStrictEqual(refund.calls, [{ x: 5 }])

        // sales: the same tool is only "sensitive" there (default policies: approval, and no one can answer)
        const sales = yield* gateway.sendMessage(alice, { text: "refund order 5", agent: "sales" })
        yield* gateway.awaitRun(op, sales.run.id)
        const salesTape = yield* gateway.readTape(op, sales.session.id, { afterSeq: 0 })
        assert.deepStrictEqual(decisions(salesTape), [["require_approval", "default.sensitive-needs-approval"]])
        assert.deepStrictEqual(refund.calls, [{ x: 5 }])

        // the engine sees the agent directly too (absent → "default")
        const engine = yield* PolicyEngine.PolicyEngine
        const request = {
          principal: "alice",
          sessionId: support.session.id,
          channel: null,
          tool: { name: "crm.refund", risk: "sensitive" as const, category: "crm" },
          args: {}
        }
        assert.strictEqual((yield* engine.decide({ ...request, agent: "support" })).decision, "allow")
        assert.strictEqual((yield* engine.decide(request)).decision, "require_approval")
      }).pipe(Effect.provide(layer), Effect.scoped)
    })
  )

  it.effect("the built-in rule engine filters on agents the same way", () =>
    Effect.gen(function* () {
      const engine = yield* PolicyEngine.PolicyEngine
      const base = {
        principal: "alice",
        sessionId: "s" as never,
        channel: null,
        tool: { name: "crm.refund", risk: "sensitive" as const, category: "crm" },
        args: {}
      }
      assert.strictEqual((yield* engine.decide({ ...base, agent: "support" })).decision, "allow")
      assert.strictEqual((yield* engine.decide({ ...base, agent: "sales" })).decision, "require_approval")
    }).pipe(
      Effect.provide(
        PolicyEngine.layerRules([
          {
            id: "support-may-refund",
            effect: "permit",
            action: "tool.execute",
            when: { tools: ["crm.refund"], agents: ["support"] }
          },
          ...PolicyEngine.defaultRules
        ])
      )
    )
  )
})
