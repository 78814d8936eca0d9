/**
 * The kernel keeps recently active sessions' prompt history and reads only what was appended since
 * (so a turn's cost does not grow with the conversation). What the model is asked must be exactly
 * what a fresh read of the whole tape gives: across runs, after a reset, with deltas streamed, and
 * after a restart over the same SQLite file.
 */
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Caller, Gateway, type ModelProvider, ScriptedModel } from "@palyra/core"
import { collect, gatewayLayer } from "@palyra/core/testing"
import { Effect } from "effect"
import { SqliteJournal } from "../src/index.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-history-"))
const alice = Caller.user("alice")

const conversation = (prompt: ModelProvider.ModelRequest) =>
  prompt.messages.map((m) => `${m.role}:${"text" in m ? m.text : ""}`)

describe("prompt history across runs", () => {
  it.live("each run sees the whole conversation, a reset starts over, a restart reads the same", () =>
    Effect.gen(function* () {
      const filename = join(dir, "history.db")
      // Streamed in pieces (so the tape has deltas), answered "answer <n>".
      const model = ScriptedModel.make((_, i) => ({ text: ["ans", "wer ", `${i}`] }))
      const turn = (text: string) =>
        Effect.gen(function* () {
          const gateway = yield* Gateway.Gateway
          const { events } = yield* gateway.startRun(alice, { text, key: "conv" })
          const seen = yield* collect(events)
          assert.strictEqual(seen.at(-1)?._tag, "RunStateChanged")
          return seen[0]!.sessionId
        })
      const sessionId = yield* Effect.gen(function* () {
        const id = yield* turn("one")
        yield* turn("two")
        yield* turn("three")
        // Many short conversations in between push nothing out of order.
        for (let i = 0; i < 5; i++) {
          const gateway = yield* Gateway.Gateway
          yield* collect((yield* gateway.startRun(alice, { text: "other", key: `other-${i}` })).events)
        }
        yield* turn("four")
        const gateway = yield* Gateway.Gateway
        yield* gateway.resetSession(alice, id)
        yield* turn("five")
        return id
      }).pipe(
        Effect.provide(gatewayLayer({ model, coalesceChars: 1, journal: SqliteJournal.layer({ filename }) })),
        Effect.scoped
      )
      const prompts = model.prompts.map(conversation)
      assert.deepStrictEqual(prompts[0], ["user:one"])
      assert.deepStrictEqual(prompts[1], ["user:one", "assistant:answer 0", "user:two"])
      assert.deepStrictEqual(prompts[2], [
        "user:one",
        "assistant:answer 0",
        "user:two",
        "assistant:answer 1",
        "user:three"
      ])
      assert.deepStrictEqual(prompts[8], [
        "user:one",
        "assistant:answer 0",
        "user:two",
        "assistant:answer 1",
        "user:three",
        "assistant:answer 2",
        "user:four"
      ])
      // After the reset only what came after it.
      assert.deepStrictEqual(prompts[9], ["user:five"])

      // A new process over the same file (empty cache) asks the same as a warm one would.
      const after = ScriptedModel.make(() => ({ text: "again" }))
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        yield* collect((yield* gateway.startRun(alice, { text: "six", sessionId })).events)
      }).pipe(Effect.provide(gatewayLayer({ model: after, journal: SqliteJournal.layer({ filename }) })), Effect.scoped)
      assert.deepStrictEqual(after.prompts.map(conversation)[0], ["user:five", "assistant:answer 9", "user:six"])
    })
  )
})
