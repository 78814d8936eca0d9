/**
 * After a crash, a tool call that reached `ToolStarted` without a `ToolResult` is never re-run blindly:
 * an idempotent tool may run again; an at-most-once tool is reported to the model as "interrupted,
 * outcome unknown". The state is built directly on a journal, as a crashed process would leave it.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Option, Schema } from "effect"
import {
  Caller,
  Canonical,
  Gateway,
  Journal,
  MemoryJournal,
  Records,
  ScriptedModel,
  type TapeEvent,
  Tool
} from "../src/index.js"
import { gatewayLayer } from "../src/testing.js"

const SESSION = "01KA0000000000000000000SES" as never
const RUN = "01KA0000000000000000000RUN" as never
const CALL = "01KA00000000000000000CALL1" as never

/** A journal holding one run that crashed after starting `tool`. */
const crashedAt = (tool: string) =>
  Effect.gen(function* () {
    const journal = yield* MemoryJournal.make()
    yield* journal.createSession(Records.makeSession({ id: SESSION, principal: "alice" }))
    const base = { sessionId: SESSION, runId: RUN, at: 1 }
    const args = { x: 1 }
    const events: Array<TapeEvent.NewTapeEvent> = [
      { _tag: "RunAccepted", ...base, principal: "alice", queuedBehind: null },
      { _tag: "RunStateChanged", ...base, from: "Pending", to: "Accepted", reason: "admitted" },
      { _tag: "UserMessage", ...base, text: "do it" },
      { _tag: "RunStateChanged", ...base, from: "Accepted", to: "InProgress", reason: "run started" },
      { _tag: "ModelRequest", ...base, turn: 1, model: "scripted", messages: 1, estimatedTokens: 1, tools: [tool] },
      { _tag: "AssistantMessage", ...base, turn: 1, text: "", finishReason: "tool-calls" },
      {
        _tag: "ToolProposed",
        ...base,
        toolCallId: CALL,
        providerCallId: "c1",
        tool,
        args,
        argsDigest: Canonical.digest({ tool, args })
      },
      {
        _tag: "PolicyDecided",
        ...base,
        toolCallId: CALL,
        tool,
        decision: "allow",
        policyIds: ["default.low-risk-allowed"],
        reasons: []
      },
      { _tag: "ToolStarted", ...base, toolCallId: CALL, tool, attempt: 1 }
    ]
    const [first, ...rest] = events
    yield* journal.append(SESSION, [first!], {
      createRun: {
        id: RUN,
        sessionId: SESSION,
        principal: "alice",
        state: "Pending",
        input: "do it",
        startSeq: 1,
        error: null,
        createdAt: 1,
        updatedAt: 1
      }
    })
    yield* journal.append(SESSION, [rest[0]!], { runTransition: { runId: RUN, from: "Pending", to: "Accepted" } })
    yield* journal.append(SESSION, [rest[1]!, rest[2]!], {
      runTransition: { runId: RUN, from: "Accepted", to: "InProgress" }
    })
    yield* journal.append(SESSION, rest.slice(3) as never)
    return journal
  })

const counted = (name: string, idempotency: Tool.Idempotency) => {
  let runs = 0
  const tool = Tool.make(name, {
    description: name,
    parameters: Schema.Struct({ x: Schema.Number }),
    risk: "low",
    idempotency,
    execute: () => Effect.sync(() => ++runs)
  })
  return { tool, runs: () => runs }
}

const resume = (journal: Journal.Service, tool: Tool.AnyTool, onInterruptedRuns: "fail" | "resume") =>
  Effect.gen(function* () {
    const model = ScriptedModel.make([{ text: "ok" }])
    const result = yield* Effect.gen(function* () {
      const gateway = yield* Gateway.Gateway
      const run = yield* gateway.awaitRun(Caller.operator("op"), RUN)
      const tape = yield* gateway.readTape(Caller.operator("op"), SESSION, { afterSeq: 0 })
      return { run, tape }
    }).pipe(
      Effect.provide(
        gatewayLayer({ model, tools: [tool], journal: Layer.succeed(Journal.Journal, journal), onInterruptedRuns })
      ),
      Effect.scoped
    )
    return { ...result, model }
  })

describe("crash recovery of tool calls", () => {
  it.effect("an at-most-once call that started is reported as interrupted, outcome unknown; never re-run", () =>
    Effect.gen(function* () {
      const journal = yield* crashedAt("payments.charge")
      const { tool, runs } = counted("payments.charge", "atMostOnce")
      const { run, tape, model } = yield* resume(journal, tool, "resume")
      assert.strictEqual(runs(), 0)
      assert.strictEqual(run.state, "Done")
      const result = tape.find((e) => e._tag === "ToolResult")
      assert.strictEqual(result?._tag === "ToolResult" && result.status, "interrupted")
      assert.match(result?._tag === "ToolResult" ? result.output : "", /outcome unknown/)
      const told = model.prompts[0]!.messages.at(-1)
      assert.strictEqual(told?.role, "tool")
    })
  )

  it.effect("an idempotent call that started is run again (attempt 2)", () =>
    Effect.gen(function* () {
      const journal = yield* crashedAt("fs.read")
      const { tool, runs } = counted("fs.read", "idempotent")
      const { run, tape } = yield* resume(journal, tool, "resume")
      assert.strictEqual(runs(), 1)
      assert.strictEqual(run.state, "Done")
      const started = tape.filter((e) => e._tag === "ToolStarted")
      assert.deepStrictEqual(
        started.map((e) => (e._tag === "ToolStarted" ? e.attempt : 0)),
        [1, 2]
      )
    })
  )

  it.effect("by default, a run in progress at a crash is marked Failed (interrupted) and nothing re-runs", () =>
    Effect.gen(function* () {
      const journal = yield* crashedAt("fs.read")
      const { tool, runs } = counted("fs.read", "idempotent")
      const { run, tape } = yield* resume(journal, tool, "fail")
      assert.strictEqual(runs(), 0)
      assert.strictEqual(run.state, "Failed")
      assert.strictEqual(run.error?.code, "interrupted")
      assert.strictEqual(tape.at(-1)?._tag, "RunStateChanged")
      assert.isTrue(Option.isSome(yield* journal.getRun(RUN)))
    })
  )
})
