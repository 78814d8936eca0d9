/**
 * With the context engine as the prompt stage (the daemon's), a turn on an existing session reads
 * nothing back from the tape either: the history cache keeps the last ended run's streamed deltas,
 * so the run's history is gap-free from the previous run's last prompt on and the engine folds that
 * tail instead of reading it. What the model is asked is what the kernel's own prompt stage builds
 * from a fresh read of the tape.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { ContextEngine } from "../src/context.js"
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
import { gatewayLayer } from "../src/testing.js"
import { countingReads, drain } from "./helpers.js"

const alice = Caller.user("alice")
const calc = Tool.make("calc", {
  description: "calc",
  parameters: Schema.Struct({ x: Schema.Number }),
  risk: "low",
  execute: ({ x }) => Effect.succeed(x * 2)
})
type AnyTool = typeof calc

// Turns on one keyed session through the engine: turns after the first read the tape 0 times, and
// each prompt is what the kernel's own prompt stage builds from a fresh read of the tape.
const readsAndPrompts = (model: ScriptedModel.ScriptedModel, tools: ReadonlyArray<AnyTool>) =>
  Effect.gen(function* () {
    const inner = yield* MemoryJournal.make()
    const { journal, reads } = countingReads(inner)
    const options = { model, encoding: "o200k_base" as const, contextWindow: 8_000, outputReserve: 500 }
    const engine = yield* ContextEngine.make({ journal, ...options })
    const layer = gatewayLayer({
      model,
      tools,
      coalesceChars: 1,
      journal: Layer.succeed(Journal.Journal, journal),
      promptAssembler: Layer.succeed(PromptAssembler.PromptAssembler, engine.assembler)
    }) as Layer.Layer<Gateway.Gateway>
    yield* Effect.gen(function* () {
      const gateway = yield* Gateway.Gateway
      const turn = (text: string) =>
        Effect.scoped(
          Effect.flatMap(gateway.startRunFollowing(alice, { text, key: "k" }), (r) =>
            Effect.map(drain(r.follower), (events) => ({ events, run: r.run, session: r.session }))
          )
        )
      // What the kernel's own prompt stage builds from the tape read up to a run's start commit.
      const prompts = (sessionId: TapeEvent.TapeEvent["sessionId"], startSeq: number) =>
        Effect.gen(function* () {
          const session = yield* Journal.requireSession(inner, sessionId)
          const history = yield* inner.readTape(sessionId, { afterSeq: 0, uptoSeq: startSeq + 3 })
          const built = yield* PromptAssembler.fromHistory.assemble({
            session,
            runId: history.at(-1)!.runId!,
            history,
            instructions: undefined,
            tools: []
          })
          return built.request.messages
        })
      const first = yield* turn("one")
      assert.isAbove(first.events.filter((e) => e._tag === "AssistantDelta").length, 1)
      for (const text of ["two", "three", "four"]) {
        const before = reads.count
        const calls = model.prompts.length
        const { events, run, session } = yield* turn(text)
        assert.strictEqual(reads.count - before, 0, `turn "${text}" read the tape`)
        assert.strictEqual(events.at(-1)?._tag, "RunStateChanged")
        // The run's first prompt: the whole conversation so far, as a fresh read of the tape gives it.
        const asked = yield* prompts(session.id, run.startSeq)
        assert.deepStrictEqual(model.prompts[calls]?.messages, asked)
      }
    }).pipe(Effect.provide(layer), Effect.scoped)
  })

describe("the context engine's reads", () => {
  it.live("turns on an existing session read the tape 0 times; the prompt is what a fresh read of the tape gives", () =>
    // Answers streamed in several deltas (each its own tape event: coalesceChars 1).
    readsAndPrompts(
      ScriptedModel.make((_, i) => ({ text: ["an", "swer ", `${i}`] })),
      []
    )
  )

  it.live("runs of several model calls (a tool call, then the answer): the same, with one call's deltas kept", () =>
    readsAndPrompts(
      ScriptedModel.make((request, i) =>
        request.messages.at(-1)?.role === "user"
          ? { text: ["let me ", "check"], toolCalls: [{ name: "calc", args: { x: i } }] }
          : { text: ["the ", "answer ", `${i}`] }
      ),
      [calc]
    )
  )

  it.live(
    "a new session's first prompt (and the first after a reset) reads the tape 0 times; the prompt equals a fresh read's",
    () =>
      Effect.gen(function* () {
        const inner = yield* MemoryJournal.make()
        const { journal, reads } = countingReads(inner)
        const model = ScriptedModel.make((_, i) => ({ text: ["an", "swer ", `${i}`] }))
        const options = { model, encoding: "o200k_base" as const, contextWindow: 8_000, outputReserve: 500 }
        const engine = yield* ContextEngine.make({ journal, ...options })
        const layer = gatewayLayer({
          model,
          coalesceChars: 1,
          journal: Layer.succeed(Journal.Journal, journal),
          promptAssembler: Layer.succeed(PromptAssembler.PromptAssembler, engine.assembler)
        }) as Layer.Layer<Gateway.Gateway>
        yield* Effect.gen(function* () {
          const gateway = yield* Gateway.Gateway
          const turn = (text: string, key: string) =>
            Effect.scoped(
              Effect.flatMap(gateway.startRunFollowing(alice, { text, key }), (r) =>
                Effect.map(drain(r.follower), (events) => ({ events, run: r.run, session: r.session }))
              )
            )
          // What another engine (its cache empty) builds for the run's first prompt by reading the
          // tape up to the run's start commit (a history that is not whole makes it read).
          const freshRead = (sessionId: TapeEvent.TapeEvent["sessionId"], runId: TapeEvent.TapeEvent["runId"]) =>
            Effect.gen(function* () {
              const session = yield* Journal.requireSession(inner, sessionId)
              const other = yield* ContextEngine.make({ journal: inner, ...options })
              const built = yield* other.assembler.assemble({
                session,
                runId: runId!,
                history: [],
                instructions: undefined,
                tools: []
              })
              return built.request.messages
            })
          for (const key of ["a", "b", "c"]) {
            const before = reads.count
            const { events, run, session } = yield* turn(`first on ${key}`, key)
            assert.strictEqual(reads.count - before, 0, `the first turn of session ${key} read the tape`)
            assert.strictEqual(events.at(-1)?._tag, "RunStateChanged")
            const asked = model.prompts.at(-1)?.messages
            // The engine's own cold read, started at the run's start commit (its answer not yet there).
            const upTo = yield* inner.readTape(session.id, { afterSeq: 0, uptoSeq: run.startSeq + 3 })
            const kernel = yield* PromptAssembler.fromHistory.assemble({
              session,
              runId: run.id,
              history: upTo,
              instructions: undefined,
              tools: []
            })
            assert.deepStrictEqual(asked, kernel.request.messages)
            assert.isAbove(asked?.length ?? 0, 0)
            // And what an engine with an empty cache reads now: the same, then the run's answer.
            const fresh = yield* freshRead(session.id, run.id)
            assert.deepStrictEqual(fresh.slice(0, asked?.length ?? 0), asked)
            assert.strictEqual(fresh.length, (asked?.length ?? 0) + 1)
          }
          // A reset session: its cached entry no longer fits, and the first prompt after the reset
          // is built from the loop's history (which starts after the new `historyFromSeq`).
          const one = yield* turn("before the reset", "r")
          yield* turn("still before", "r")
          yield* gateway.resetSession(alice, one.session.id)
          const before = reads.count
          const after = yield* turn("after the reset", "r")
          assert.strictEqual(reads.count - before, 0, "the first turn after a reset read the tape")
          const asked = model.prompts.at(-1)?.messages
          // Equal to what an engine with an empty cache reads for the session now, minus the answer.
          const fresh = yield* freshRead(after.session.id, after.run.id)
          assert.deepStrictEqual(fresh.slice(0, asked?.length ?? 0), asked)
          assert.strictEqual(fresh.length, (asked?.length ?? 0) + 1)
          assert.strictEqual(asked?.length, 1)
        }).pipe(Effect.provide(layer), Effect.scoped)
      })
  )
})
