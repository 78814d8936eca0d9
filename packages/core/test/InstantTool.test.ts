/**
 * An instant tool (`Tool.instant`: no I/O, no side effect — `time.now`) that the policy allows
 * commits its decision, start and result in one append after it ran: a one-tool turn commits three
 * times, not four. Every other tool's decision and start are still committed before it runs; a
 * denied instant tool never runs; what a misdeclared instant tool writes while it runs lands after
 * its decision and start, in tape order. Real Cedar (the default policies), the built-in `time.now`,
 * the Gateway over a memory journal that records each commit.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { CedarPolicy } from "../src/cedar.js"
import { Caller, Gateway, ScriptedModel, type TapeEvent, Tool } from "../src/index.js"
import { collect, gapFree, gatewayLayer, tags } from "../src/testing.js"
import { BuiltinTools } from "../src/tools.js"
import { recordingAppends } from "./helpers.js"

const alice = Caller.user("alice")
const usage = { inputTokens: 7, outputTokens: 3 }

/** A model that calls `name` once, then answers from the tool's result. */
const caller = (name: string) =>
  ScriptedModel.make((request) =>
    request.messages.at(-1)?.role === "tool" ? { text: "it is now", usage } : { toolCalls: [{ name }], usage }
  )

/** One turn through the Gateway: what its stream delivered, in order. */
const turn = (
  options: Omit<Parameters<typeof gatewayLayer>[0], "journal">,
  journal: ReturnType<typeof recordingAppends>["layer"]
) =>
  Effect.gen(function* () {
    const gateway = yield* Gateway.Gateway
    const { events } = yield* gateway.startRun(alice, { text: "what time is it?" })
    return yield* collect(events)
  }).pipe(Effect.provide(gatewayLayer({ ...options, journal })), Effect.scoped)

const ofTag = <T extends TapeEvent.TapeEvent["_tag"]>(events: ReadonlyArray<TapeEvent.TapeEvent>, tag: T) =>
  events.filter((e): e is Extract<TapeEvent.TapeEvent, { _tag: T }> => e._tag === tag)

describe("an instant tool's commits", () => {
  it.effect("time.now allowed by Cedar: its decision, start and result are one append (three commits a turn)", () =>
    Effect.gen(function* () {
      const { groups, layer } = recordingAppends()
      const seen = yield* turn(
        { model: caller("time.now"), tools: [BuiltinTools.timeTool], policy: CedarPolicy.layer() },
        layer
      )
      assert.deepStrictEqual(groups.map(tags), [
        ["RunAccepted", "RunStateChanged", "UserMessage", "RunStateChanged"],
        ["ModelRequest", "AssistantMessage", "ToolProposed", "Usage", "PolicyDecided", "ToolStarted", "ToolResult"],
        ["ModelRequest", "AssistantDelta", "AssistantMessage", "Usage", "RunStateChanged"]
      ])
      const tape = groups.flat()
      assert.isUndefined(gapFree(tape))
      // The subscriber saw exactly what was committed, in commit order.
      assert.deepStrictEqual(
        seen.map((e) => e.tapeSeq),
        tape.map((e) => e.tapeSeq)
      )
      const [decided] = ofTag(tape, "PolicyDecided")
      assert.strictEqual(decided?.decision, "allow")
      assert.deepStrictEqual(decided?.policyIds, ["default.low-risk-allowed"])
      const [result] = ofTag(tape, "ToolResult")
      assert.strictEqual(result?.status, "ok")
      assert.match(result?.output ?? "", /"epochMs":\d+/)
      // The second prompt was built from the committed result.
      const done = ofTag(tape, "RunStateChanged").at(-1)
      assert.strictEqual(done?.to, "Done")
    })
  )

  it.effect("a low-risk tool that is not instant still commits its decision and start before it runs", () =>
    Effect.gen(function* () {
      const { groups, layer } = recordingAppends()
      // What was committed when the tool ran: its start must already be there.
      const atRun: Array<ReadonlyArray<string>> = []
      const probe = Tool.make("probe", {
        description: "records the commits made before it ran",
        parameters: Schema.Struct({}),
        risk: "low",
        idempotency: "idempotent",
        execute: () => Effect.sync(() => atRun.push(groups.flat().map((e) => e._tag)))
      })
      yield* turn({ model: caller("probe"), tools: [probe], policy: CedarPolicy.layer() }, layer)
      assert.includeMembers([...atRun[0]!], ["PolicyDecided", "ToolStarted"])
      assert.deepStrictEqual(groups.map(tags).slice(1, 3), [
        ["ModelRequest", "AssistantMessage", "ToolProposed", "Usage", "PolicyDecided", "ToolStarted"],
        ["ToolResult"]
      ])
    })
  )

  it.effect("an instant tool that is not idempotent, or not low-risk, is not run before its start commits", () =>
    Effect.gen(function* () {
      // Whether the tool's start was committed when it ran.
      const startedAtRun: Array<boolean> = []
      // Cedar: the sensitive one is allowed to run by a policy of its own.
      const policies = `${CedarPolicy.defaultPolicies}
@id("t1-allowed")
permit (principal, action == Palyra::Action::"tool.execute", resource == Palyra::Tool::"t1");`
      for (const [name, risk, idempotency] of [
        ["t0", "low", "atMostOnce"],
        ["t1", "sensitive", "idempotent"]
      ] as const) {
        const { groups, layer } = recordingAppends()
        const tool = Tool.make(name, {
          description: "instant, but not eligible",
          parameters: Schema.Struct({}),
          risk,
          idempotency,
          instant: true,
          execute: () => Effect.sync(() => startedAtRun.push(groups.flat().some((e) => e._tag === "ToolStarted")))
        })
        yield* turn({ model: caller(name), tools: [tool], policy: CedarPolicy.layer({ policies }) }, layer)
        const [decided] = ofTag(groups.flat(), "PolicyDecided")
        assert.strictEqual(decided?.decision, "allow")
      }
      assert.deepStrictEqual(startedAtRun, [true, true])
    })
  )

  it.effect("an instant tool denied by Cedar never runs; its decision and denied result are on the tape", () =>
    Effect.gen(function* () {
      const { groups, layer } = recordingAppends()
      let ran = 0
      const clock = Tool.make("time.now", {
        description: "the time",
        parameters: Schema.Struct({}),
        risk: "low",
        idempotency: "idempotent",
        instant: true,
        execute: () => Effect.sync(() => ++ran)
      })
      const policies = `${CedarPolicy.defaultPolicies}
@id("no-clock")
@reason("no clocks here")
forbid (principal, action, resource == Palyra::Tool::"time.now");`
      yield* turn({ model: caller("time.now"), tools: [clock], policy: CedarPolicy.layer({ policies }) }, layer)
      assert.strictEqual(ran, 0)
      const tape = groups.flat()
      assert.deepStrictEqual(
        ofTag(tape, "PolicyDecided").map((e) => [e.decision, ...e.policyIds]),
        [["deny", "no-clock"]]
      )
      assert.deepStrictEqual(
        ofTag(tape, "ToolResult").map((e) => e.status),
        ["denied"]
      )
      assert.notInclude(tags(tape), "ToolStarted")
    })
  )

  it.effect("what a (misdeclared) instant tool writes while it runs lands after its decision and start", () =>
    Effect.gen(function* () {
      const { groups, layer } = recordingAppends()
      const noting = Tool.make("noting", {
        description: "writes a note",
        parameters: Schema.Struct({}),
        risk: "low",
        idempotency: "idempotent",
        instant: true,
        execute: (_, context) => Effect.as(context.note("a note"), "noted")
      })
      yield* turn({ model: caller("noting"), tools: [noting], policy: CedarPolicy.layer() }, layer)
      const tape = groups.flat()
      assert.isUndefined(gapFree(tape))
      assert.deepStrictEqual(
        tags(tape).filter((t) => ["PolicyDecided", "ToolStarted", "SessionNote", "ToolResult"].includes(t)),
        ["PolicyDecided", "ToolStarted", "SessionNote", "ToolResult"]
      )
    })
  )

  it.effect(
    "a result the journal refuses: the decision, start and model turn still land, before the run's failure",
    () =>
      Effect.gen(function* () {
        // The tool's output fits its own budget but not the journal's event limit: the one append
        // carrying decision, start and result is refused, and the run fails — with everything the
        // refused append held still on the tape (and its tokens counted), no result without its call.
        const big = Tool.make("big.read", {
          description: "returns a lot",
          parameters: Schema.Struct({}),
          risk: "low",
          idempotency: "idempotent",
          instant: true,
          outputBudget: 100_000,
          execute: () => Effect.succeed("x".repeat(50_000))
        })
        const { groups, layer } = recordingAppends({ maxEventBytes: 20_000 })
        const { seen, tokensUsed } = yield* Effect.gen(function* () {
          const gateway = yield* Gateway.Gateway
          const { events, run } = yield* gateway.startRun(alice, { text: "read it all" })
          const seen = yield* collect(events)
          const session = yield* gateway.getSession(alice, run.sessionId)
          return { seen, tokensUsed: session.tokensUsed }
        }).pipe(
          Effect.provide(gatewayLayer({ model: caller("big.read"), tools: [big], journal: layer })),
          Effect.scoped
        )
        assert.strictEqual(tokensUsed, 10)
        const tape = groups.flat()
        assert.isUndefined(gapFree(tape))
        assert.deepStrictEqual(tags(tape).slice(4), [
          "ModelRequest",
          "AssistantMessage",
          "ToolProposed",
          "Usage",
          "PolicyDecided",
          "ToolStarted",
          "ToolResult",
          "RunError",
          "RunStateChanged"
        ])
        const [result] = ofTag(tape, "ToolResult")
        assert.strictEqual(result?.status, "interrupted")
        assert.strictEqual(result?.toolCallId, ofTag(tape, "ToolProposed")[0]?.toolCallId)
        assert.strictEqual(ofTag(tape, "RunStateChanged").at(-1)?.to, "Failed")
        assert.strictEqual(ofTag(tape, "Usage")[0]?.inputTokens, 7)
        assert.deepStrictEqual(
          seen.map((e) => e.tapeSeq),
          tape.map((e) => e.tapeSeq)
        )
      })
  )

  it.effect("staged events the journal refuses themselves are dropped, and the run's failure is still recorded", () =>
    Effect.gen(function* () {
      // The model's call carries arguments over the journal's event limit: the write holding its
      // proposal is refused, put back, refused again with the failure — which then lands without it.
      const model = ScriptedModel.make([
        { toolCalls: [{ name: "time.now", args: { pad: "y".repeat(30_000) } }], usage }
      ])
      const { groups, layer } = recordingAppends({ maxEventBytes: 20_000 })
      const tokensUsed = yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const { events, run } = yield* gateway.startRun(alice, { text: "what time is it?" })
        yield* collect(events)
        return (yield* gateway.getSession(alice, run.sessionId)).tokensUsed
      }).pipe(Effect.provide(gatewayLayer({ model, tools: [BuiltinTools.timeTool], journal: layer })), Effect.scoped)
      // The model turn was paid for: its tokens count though its events could not be kept.
      assert.strictEqual(tokensUsed, 10)
      const tape = groups.flat()
      assert.isUndefined(gapFree(tape))
      assert.strictEqual(ofTag(tape, "RunStateChanged").at(-1)?.to, "Failed")
      // Neither the proposal nor a result for it: no result without its call.
      assert.deepStrictEqual(tags(tape).slice(4), ["RunError", "RunStateChanged"])
      assert.strictEqual(ofTag(tape, "RunError")[0]?.code, "payload_too_large")
    })
  )

  it.effect("a failure whose message is over the journal's event limit is still recorded (its message bounded)", () =>
    Effect.gen(function* () {
      const model = ScriptedModel.make([{ fail: { reason: "bad_request", message: "z".repeat(50_000) } }])
      const { groups, layer } = recordingAppends({ maxEventBytes: 20_000 })
      yield* turn({ model, tools: [] }, layer)
      const tape = groups.flat()
      assert.strictEqual(ofTag(tape, "RunStateChanged").at(-1)?.to, "Failed")
      const [error] = ofTag(tape, "RunError")
      assert.isBelow(error?.message.length ?? Number.POSITIVE_INFINITY, 5_000)
    })
  )
})
