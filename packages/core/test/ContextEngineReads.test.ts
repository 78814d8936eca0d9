/**
 * With the context engine as the prompt stage (the daemon's), a turn on an existing session reads
 * nothing back from the tape either: the history cache keeps the last ended run's streamed deltas,
 * so the run's history is gap-free from the previous run's last prompt on and the engine folds that
 * tail instead of reading it. What the model is asked is what the kernel's own prompt stage builds
 * from a fresh read of the tape.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { ContextEngine } from "../src/context.js"
import {
  Caller,
  Follower,
  Gateway,
  Journal,
  MemoryJournal,
  PromptAssembler,
  ScriptedModel,
  type TapeEvent
} from "../src/index.js"
import { gatewayLayer } from "../src/testing.js"

const alice = Caller.user("alice")

const drain = (follower: Follower.Follower) =>
  Effect.promise(async () => {
    const out: Array<TapeEvent.TapeEvent> = []
    for (;;) {
      const r = follower.take()
      if (r === Follower.Done) return out
      if (Follower.isFailed(r)) throw r.failure
      if (r === undefined) await new Promise<void>((wake) => follower.onReady(wake))
      else out.push(...r)
    }
  })

describe("the context engine's reads", () => {
  it.live("turns on an existing session read the tape 0 times; the prompt is what a fresh read of the tape gives", () =>
    Effect.gen(function* () {
      const inner = yield* MemoryJournal.make()
      const reads = { count: 0 }
      const journal: Journal.Service = {
        ...inner,
        readTape: (sessionId, options) =>
          Effect.suspend(() => {
            reads.count++
            return inner.readTape(sessionId, options)
          })
      }
      // Answers streamed in several deltas (each its own tape event: coalesceChars 1).
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
          const { events, run, session } = yield* turn(text)
          assert.strictEqual(reads.count - before, 0, `turn "${text}" read the tape`)
          assert.strictEqual(events.at(-1)?._tag, "RunStateChanged")
          // The whole conversation so far, as a fresh read of the tape gives it.
          const asked = yield* prompts(session.id, run.startSeq)
          assert.deepStrictEqual(model.prompts.at(-1)?.messages, asked)
        }
      }).pipe(Effect.provide(layer), Effect.scoped)
    })
  )
})
