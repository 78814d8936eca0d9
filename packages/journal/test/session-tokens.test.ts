/**
 * The run's carried token count over the real SQLite journal (its writer thread): the session's head
 * comes from the writer's acknowledged commits and the session record from the main thread's
 * connection, so the count is anchored on a head read before the record. A two-call turn reads its
 * session once; another writer's tokens, committed while the run waits on a tool, are read and
 * refuse the run's next model call, as the per-call read did.
 */
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Caller, Gateway, Journal, ScriptedModel, type TapeEvent, Tool } from "@palyra/core"
import { collect, gatewayLayer } from "@palyra/core/testing"
import { Effect, Layer, Option, Schema } from "effect"
import { SqliteJournal } from "../src/index.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-tokens-"))
const alice = Caller.user("alice")

/** The file's journal with its `getSession` calls counted. */
const counted = (filename: string) => {
  const reads = { sessions: 0 }
  const layer = Layer.effect(
    Journal.Journal,
    Effect.map(Journal.Journal, (inner) => ({
      ...inner,
      getSession: (id: Parameters<Journal.Service["getSession"]>[0]) =>
        Effect.suspend(() => {
          reads.sessions++
          return inner.getSession(id)
        })
    }))
  ).pipe(Layer.provide(SqliteJournal.layer({ filename })))
  return { reads, layer }
}

/** Calls `tool` when the last message is the user's, then answers. */
const toolThenAnswer = (tool: string) =>
  ScriptedModel.make((request) =>
    request.messages.at(-1)?.role === "tool"
      ? { text: "done", usage: { inputTokens: 20, outputTokens: 5 } }
      : { toolCalls: [{ name: tool, args: { x: 1 } }], usage: { inputTokens: 20, outputTokens: 5 } }
  )

const lastState = (events: ReadonlyArray<TapeEvent.TapeEvent>) => {
  const last = events.at(-1)
  return last?._tag === "RunStateChanged" ? last.to : undefined
}

describe("the session token budget over SQLite", () => {
  it.live("a two-call turn reads its session once; another writer's tokens refuse its next call", () =>
    Effect.gen(function* () {
      const { reads, layer } = counted(join(dir, "tokens.db"))
      const writer: { journal?: Journal.Service; spend: number } = { spend: 0 }
      const spend = Tool.make("spend", {
        description: "another writer spends tokens on the session while the run waits",
        parameters: Schema.Struct({ x: Schema.Number }),
        risk: "low",
        execute: (_args, context) =>
          writer.spend === 0
            ? Effect.succeed({ ok: true })
            : Effect.orDie(
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
                  { addTokens: writer.spend }
                )
              ).pipe(Effect.as({ ok: true }))
      })
      const model = toolThenAnswer("spend")
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        writer.journal = yield* Journal.Journal
        const first = yield* collect((yield* gateway.startRun(alice, { key: "k", text: "one" })).events)
        assert.strictEqual(lastState(first), "Done")
        const before = reads.sessions
        const second = yield* collect((yield* gateway.startRun(alice, { key: "k", text: "two" })).events)
        assert.strictEqual(lastState(second), "Done")
        assert.strictEqual(second.filter((e) => e._tag === "ModelRequest").length, 2)
        assert.strictEqual(reads.sessions - before, 1, "session reads in a two-call turn")

        // 100 tokens so far, 125 after the third run's first call; another writer adds 9,950 while
        // its tool runs: its second call is over the budget of 10,000 (it would not be without them).
        writer.spend = 9_950
        const prompts = model.prompts.length
        const third = yield* collect((yield* gateway.startRun(alice, { key: "k", text: "three" })).events)
        assert.strictEqual(lastState(third), "Failed")
        assert.include(third.find((e) => e._tag === "RunError")?.message ?? "", "maxTokensPerSession")
        assert.strictEqual(model.prompts.length, prompts + 1)
        const session = Option.getOrThrow(yield* writer.journal.getSession(first[0]!.sessionId))
        assert.strictEqual(session.tokensUsed, 10_075)
      }).pipe(
        Effect.provide(
          gatewayLayer({ model, tools: [spend], budgets: { maxTokensPerSession: 10_000 }, journal: layer })
        ),
        Effect.scoped
      )
    })
  )
})
