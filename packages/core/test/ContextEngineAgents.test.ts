/**
 * The context engine per agent: a session's compaction summary is written by its agent's model,
 * not the kernel's (the real Gateway, the engine as the kernel's prompt assembler via
 * `ContextEngine.layer`, scripted models that say who they are).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, type Layer } from "effect"
import { Compactor, ContextEngine } from "../src/context.js"
import { Caller, Gateway, ScriptedModel } from "../src/index.js"
import { gatewayLayer } from "../src/testing.js"

type Request = Parameters<ScriptedModel.ScriptedModel["stream"]>[0]
const alice = Caller.user("alice")
const isCompaction = (r: Request) => r.instructions?.startsWith(Compactor.COMPACTION_MARKER) === true
const mustKeepOf = (r: Request): Array<string> => {
  const first = r.messages[0]
  const text = first?.role === "user" ? first.text : ""
  return (/<must-keep>\n([\s\S]*?)<\/must-keep>/.exec(text)?.[1] ?? "").split("\n").filter((l) => l.length > 0)
}

/** Answers turns, and writes a faithful summary signed with its own name. */
const agentModel = (who: string) =>
  ScriptedModel.make(
    (request) =>
      isCompaction(request)
        ? {
            text: [
              "## Goal",
              `Summary written by ${who}.`,
              "## Decisions",
              "- none",
              "## Facts & identifiers",
              ...mustKeepOf(request),
              "## Files",
              "- none",
              "## Open work",
              "- none"
            ].join("\n")
          }
        : { text: `${who} noted: ${JSON.stringify(request.messages.at(-1)).slice(0, 60)}` },
    { name: `${who}-model` }
  )

describe("ContextEngine per agent", () => {
  it.effect("each session's summary is written by its own agent's model; the kernel's model is never asked", () =>
    Effect.gen(function* () {
      const kernelModel = ScriptedModel.make([], { name: "kernel-model" })
      const alpha = agentModel("alpha")
      const beta = agentModel("beta")
      const layer = gatewayLayer({
        model: kernelModel,
        agents: [
          { id: "alpha", model: alpha },
          { id: "beta", model: beta }
        ],
        promptAssembler: ContextEngine.layer({
          encoding: "o200k_base",
          contextWindow: 4_000,
          outputReserve: 500,
          minInputTokens: 200,
          autoCompact: false,
          keepTurns: 1
        })
      }) as Layer.Layer<Gateway.Gateway>
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        for (const agent of ["alpha", "beta"] as const) {
          for (let i = 1; i <= 4; i++) {
            const { run } = yield* gateway.sendMessage(alice, {
              key: agent,
              agent,
              text: `turn ${i}: order ${agent}-${i * 1009} ships to dock ${i * 7}`
            })
            assert.strictEqual((yield* gateway.awaitRun(alice, run.id)).state, "Done")
          }
        }
        const sessions = yield* gateway.listSessions(alice)
        for (const agent of ["alpha", "beta"] as const) {
          const session = sessions.find((s) => s.agentId === agent)!
          const result = yield* gateway.compactSession(alice, session.id)
          assert.isTrue(result.applied)
          assert.strictEqual(result.summarizer, "model")
          assert.include(result.summary, `Summary written by ${agent}.`)
        }
        assert.strictEqual(alpha.prompts.filter(isCompaction).length, 1)
        assert.strictEqual(beta.prompts.filter(isCompaction).length, 1)
        assert.strictEqual(kernelModel.prompts.length, 0)
      }).pipe(Effect.provide(layer), Effect.scoped)
    })
  )
})
