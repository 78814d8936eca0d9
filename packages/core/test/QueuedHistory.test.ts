/**
 * A run queued behind another in its session: its start commit lands among the running run's
 * events, so admission hands it to the history cache, which holds it beside the session's entry and
 * merges it in its place when the running run's events come back at its end. The queued run's
 * prompt then needs no tape read, and is exactly what the prompt stage builds from a fresh read.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Caller, Gateway, Journal, MemoryJournal, ScriptedModel, type TapeEvent } from "../src/index.js"
import { fromHistory } from "../src/kernel/PromptAssembler.js"
import { gatewayLayer } from "../src/testing.js"
import { countingReads, drain } from "./helpers.js"

const alice = Caller.user("alice")

describe("a queued run's history", () => {
  it.live("comes from the history cache (no tape read), equal to a fresh read's prompt", () =>
    Effect.gen(function* () {
      // The first answer takes 200 ms (two deltas): the next two runs are admitted while it runs.
      const model = ScriptedModel.make((request) =>
        (request.messages.at(-1) as { text?: string }).text === "first"
          ? { text: ["a", "b"], delayPerDelta: "100 millis" }
          : { text: ["answer to ", (request.messages.at(-1) as { text: string }).text] }
      )
      const { journal, reads } = countingReads(yield* MemoryJournal.make())
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        // Followed from admission (their events by publication: the only reads are the runs' own).
        const first = yield* gateway.startRunFollowing(alice, { text: "first", key: "q" })
        const second = yield* gateway.startRunFollowing(alice, { text: "second", key: "q" })
        const third = yield* gateway.startRunFollowing(alice, { text: "third", key: "q" })
        const events = yield* Effect.forEach([first, second, third], (r) => drain(r.follower))
        for (const seen of events) assert.strictEqual(seen.at(-1)?._tag, "RunStateChanged")
        // The queued runs' RunAccepted name the run they waited for.
        assert.strictEqual((events[1]![0] as { queuedBehind: unknown }).queuedBehind, first.run.id)
        assert.strictEqual((events[2]![0] as { queuedBehind: unknown }).queuedBehind, second.run.id)
        assert.strictEqual(reads.count, 0, "a run read the tape")

        // Each run's prompt is what the prompt stage builds from the tape up to the run's start commit.
        const tape = yield* journal.readTape(first.session.id, { afterSeq: 0 })
        const session = yield* gateway.getSession(alice, first.session.id)
        assert.strictEqual(model.prompts.length, 3)
        for (const [i, run] of [first.run, second.run, third.run].entries()) {
          const started = tape.find(
            (e): e is TapeEvent.TapeEvent & { _tag: "RunStateChanged" } =>
              e._tag === "RunStateChanged" && e.runId === run.id && e.to === "InProgress"
          )!
          const fresh = yield* fromHistory.assemble({
            session,
            runId: run.id,
            history: tape.filter((e) => e.tapeSeq <= started.tapeSeq),
            instructions: model.prompts[i]!.instructions,
            tools: model.prompts[i]!.tools
          })
          assert.deepStrictEqual(model.prompts[i], fresh.request)
        }
        assert.deepStrictEqual(
          model.prompts[2]!.messages.map((m) => ("text" in m ? m.text : "")),
          ["first", "ab", "second", "answer to second", "third"]
        )
      }).pipe(
        Effect.scoped,
        Effect.provide(gatewayLayer({ model, coalesceChars: 1, journal: Layer.succeed(Journal.Journal, journal) }))
      )
    })
  )
})
