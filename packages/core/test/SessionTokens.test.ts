/**
 * The per-session token budget (`maxTokensPerSession`) without a session read per model call: the
 * run reads its session once (its prologue, after the session's head) and carries the token count
 * forward through its own commits; a model call re-reads the record only when the session's head
 * moved past what the run counted (someone else appended: a compaction, a note, an operator's
 * write). These tests count the reads and check that every committed token is still seen: the run's
 * own, an earlier run's (across operator resets), and a concurrent writer's in the middle of a run.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Option, Schema } from "effect"
import {
  Caller,
  Gateway,
  Journal,
  MemoryJournal,
  PromptAssembler,
  ScriptedModel,
  type TapeEvent,
  Tool
} from "../src/index.js"
import { collect, gatewayLayer } from "../src/testing.js"
import { countingReads, recordingTool } from "./helpers.js"

const alice = Caller.user("alice")

const finalState = (events: ReadonlyArray<TapeEvent.TapeEvent>) => {
  const last = events.at(-1)
  return last?._tag === "RunStateChanged" ? last.to : undefined
}
const runError = (events: ReadonlyArray<TapeEvent.TapeEvent>) =>
  events.find((e): e is TapeEvent.TapeEventOf<"RunError"> => e._tag === "RunError")

/** A model that calls `tool` once (with `usage` per call), then answers. */
const toolThenAnswer = (tool: string, usage = { inputTokens: 20, outputTokens: 5 }) =>
  ScriptedModel.make((request) =>
    request.messages.at(-1)?.role === "tool"
      ? { text: "done", usage }
      : { toolCalls: [{ name: tool, args: { x: 2 } }], usage }
  )

const withCounted = <A, E>(
  options: { model: ScriptedModel.ScriptedModel; tools?: ReadonlyArray<Tool.AnyTool>; maxTokensPerSession?: number },
  body: (
    gateway: Gateway.Service,
    journal: Journal.Service,
    reads: ReturnType<typeof countingReads>["reads"]
  ) => Effect.Effect<A, E>
) =>
  Effect.gen(function* () {
    const { journal, reads } = countingReads(yield* MemoryJournal.make())
    return yield* Effect.flatMap(Gateway.Gateway, (gateway) => body(gateway, journal, reads)).pipe(
      Effect.provide(
        gatewayLayer({
          model: options.model,
          tools: options.tools ?? [],
          budgets:
            options.maxTokensPerSession === undefined ? {} : { maxTokensPerSession: options.maxTokensPerSession },
          journal: Layer.succeed(Journal.Journal, journal)
        })
      ),
      Effect.scoped
    )
  })

describe("the session's token budget", () => {
  it.effect("a turn reads its session once, whatever its number of model calls", () =>
    Effect.gen(function* () {
      const { tool } = recordingTool("math.double", "low")
      yield* withCounted({ model: toolThenAnswer("math.double"), tools: [tool] }, (gateway, _journal, reads) =>
        Effect.gen(function* () {
          // The session exists (first turn), then one tool turn (two model calls) is counted.
          yield* collect((yield* gateway.startRun(alice, { key: "k", text: "first" })).events)
          const before = { ...reads }
          const seen = yield* collect((yield* gateway.startRun(alice, { key: "k", text: "again" })).events)
          assert.strictEqual(finalState(seen), "Done")
          assert.strictEqual(seen.filter((e) => e._tag === "ModelRequest").length, 2)
          // The run's prologue reads the session once; its two model calls read nothing (they
          // read it once each before: 3).
          assert.strictEqual(reads.sessions - before.sessions, 1, "session reads in a two-call turn")
          assert.strictEqual(reads.keys - before.keys, 1, "key look-ups (admission)")
        })
      )
    })
  )

  it.effect("the run's own committed tokens count at its next model call", () =>
    Effect.gen(function* () {
      const { tool, calls } = recordingTool("math.double", "low")
      // 1,000 tokens in the first call: the second call is over a budget of 1,000.
      const model = toolThenAnswer("math.double", { inputTokens: 900, outputTokens: 100 })
      yield* withCounted({ model, tools: [tool], maxTokensPerSession: 1000 }, (gateway, journal) =>
        Effect.gen(function* () {
          const started = yield* gateway.startRun(alice, { key: "k", text: "go" })
          const seen = yield* collect(started.events)
          assert.strictEqual(finalState(seen), "Failed")
          assert.include(runError(seen)?.message ?? "", "maxTokensPerSession")
          assert.strictEqual(calls.length, 1, "the tool ran")
          assert.strictEqual(model.prompts.length, 1, "the second call was refused")
          const session = Option.getOrThrow(yield* journal.getSession(started.session.id))
          assert.strictEqual(session.tokensUsed, 1000)
        })
      )
    })
  )

  it.effect("tokens a concurrent writer commits during a run are seen by its next model call", () =>
    Effect.gen(function* () {
      // The tool stands for another writer on the session while the run waits (an operator's
      // compaction, another process path): it appends straight to the journal, with 5,000 tokens.
      const writer: { journal?: Journal.Service } = {}
      const tool = Tool.make("spend", {
        description: "another writer spends tokens on the session",
        parameters: Schema.Struct({ x: Schema.Number }),
        risk: "low",
        execute: (_args, context) =>
          Effect.orDie(
            writer.journal!.append(
              context.sessionId,
              [
                {
                  _tag: "SessionNote",
                  sessionId: context.sessionId,
                  runId: null,
                  at: 0,
                  author: "other",
                  text: "spent"
                }
              ],
              { addTokens: 5000 }
            )
          ).pipe(Effect.as({ ok: true }))
      })
      const model = toolThenAnswer("spend")
      yield* withCounted({ model, tools: [tool], maxTokensPerSession: 5000 }, (gateway, journal, reads) =>
        Effect.gen(function* () {
          writer.journal = journal
          const before = reads.sessions
          const seen = yield* collect((yield* gateway.startRun(alice, { key: "k", text: "go" })).events)
          assert.strictEqual(finalState(seen), "Failed")
          assert.include(runError(seen)?.message ?? "", "maxTokensPerSession")
          assert.strictEqual(model.prompts.length, 1, "the second call was refused")
          // The prologue's read, and the second call's: the head had moved past the run's count.
          assert.strictEqual(reads.sessions - before, 2)
        })
      )
    })
  )

  it.effect("tokens committed between the run's last commit and its next check (the prompt stage) are seen", () =>
    Effect.gen(function* () {
      // A prompt stage that spends tokens itself, as a context engine's compaction does inside the run:
      // at the run's second model call it appends 5,000 tokens straight to the journal, after the
      // run's last commit (no commit of the run's own follows it before the check: only the head
      // moved), then builds the prompt.
      const { tool } = recordingTool("math.double", "low")
      let calls = 0
      const spending = Layer.effect(
        PromptAssembler.PromptAssembler,
        Effect.map(Journal.Journal, (journal) => ({
          assemble: (input: PromptAssembler.AssembleInput) =>
            ++calls === 2
              ? Effect.zipRight(
                  Effect.orDie(
                    journal.append(
                      input.session.id,
                      [
                        {
                          _tag: "SessionNote",
                          sessionId: input.session.id,
                          runId: null,
                          at: 0,
                          author: "compactor",
                          text: "summary"
                        }
                      ],
                      { addTokens: 5000 }
                    )
                  ),
                  PromptAssembler.fromHistory.assemble(input)
                )
              : PromptAssembler.fromHistory.assemble(input)
        }))
      )
      const model = toolThenAnswer("math.double")
      const { journal, reads } = countingReads(yield* MemoryJournal.make())
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const seen = yield* collect((yield* gateway.startRun(alice, { key: "k", text: "go" })).events)
        assert.strictEqual(finalState(seen), "Failed")
        assert.include(runError(seen)?.message ?? "", "maxTokensPerSession")
        assert.strictEqual(model.prompts.length, 1, "the second call was refused")
        assert.strictEqual(reads.sessions, 2, "the prologue's read and the second call's")
      }).pipe(
        Effect.provide(
          gatewayLayer({
            model,
            tools: [tool],
            budgets: { maxTokensPerSession: 5000 },
            promptAssembler: spending,
            journal: Layer.succeed(Journal.Journal, journal)
          })
        ),
        Effect.scoped
      )
    })
  )

  it.effect("an earlier run's tokens count, across operator resets of the session", () =>
    Effect.gen(function* () {
      const model = ScriptedModel.make(() => ({ text: "ok", usage: { inputTokens: 500, outputTokens: 100 } }))
      yield* withCounted({ model, maxTokensPerSession: 1000 }, (gateway) =>
        Effect.gen(function* () {
          const op = Caller.operator("op")
          const a = yield* collect((yield* gateway.startRun(alice, { key: "k", text: "one" })).events)
          // A reset starts a fresh prompt history; the session's spending stays.
          yield* gateway.resetSession(op, a[0]!.sessionId)
          const b = yield* collect((yield* gateway.startRun(alice, { key: "k", text: "two" })).events)
          yield* gateway.resetSession(op, a[0]!.sessionId)
          const c = yield* collect((yield* gateway.startRun(alice, { key: "k", text: "three" })).events)
          assert.strictEqual(finalState(a), "Done")
          assert.strictEqual(finalState(b), "Done")
          assert.strictEqual(finalState(c), "Failed")
          assert.include(runError(c)?.message ?? "", "maxTokensPerSession")
          assert.strictEqual(model.prompts.length, 2)
          const session = yield* gateway.getSession(alice, a[0]!.sessionId)
          assert.strictEqual(session.tokensUsed, 1200)
          assert.strictEqual(session.resetGeneration, 2)
        })
      )
    })
  )
})
