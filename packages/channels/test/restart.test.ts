import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Caller, Gateway, ScriptedModel, Tool } from "@palyra/core"
import { SqliteJournal } from "@palyra/journal"
import { Effect, Schema } from "effect"
import { ChannelRouter, ChannelStore, Pairing, SqliteChannelStore } from "../src/index.js"
import { channelsEnv, eventually, message, operator, texts } from "./support/env.js"
import { tempDir } from "./support/tmp.js"

describe("ChannelRouter across a restart", () => {
  it.live("a run waiting for approval is followed again: the chat approves it and gets its one reply", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      const files = { journal: join(dir, "journal.db"), channels: join(dir, "channels.db") }
      const calls: Array<unknown> = []
      const write = Tool.make("notes.write", {
        description: "write a note",
        parameters: Schema.Struct({ text: Schema.String }),
        risk: "sensitive",
        execute: (args) => Effect.sync(() => void calls.push(args)).pipe(Effect.as({ ok: true }))
      })
      const env = (model: ScriptedModel.ScriptedModel) =>
        channelsEnv({
          channels: [{ name: "tg", coalesce: { window: 0 } }],
          model,
          tools: [write],
          journal: SqliteJournal.layer({ filename: files.journal }),
          store: SqliteChannelStore.layer({ filename: files.channels })
        })
      const approvalPrompt = (t: Array<string>) => t.filter((x) => x.startsWith("Approval needed"))

      // First process: the run asks for approval, the prompt is in the outbox, then it stops.
      const code = yield* Effect.gen(function* () {
        yield* Effect.flatMap(Pairing.Pairing, (p) =>
          p.bind(operator, { identity: { channel: "tg", account: "bot1", senderId: "1001" }, principal: "alice" })
        )
        const router = yield* ChannelRouter.ChannelRouter
        yield* router.handle(message({ text: "note: milk" }))
        const prompts = yield* eventually(texts(), (t) => approvalPrompt(t).length === 1, "the prompt")
        return /\/approve ([0-9A-Z]{6})/.exec(approvalPrompt(prompts)[0]!)![1]!
      }).pipe(
        Effect.provide(env(ScriptedModel.make([{ toolCalls: [{ name: "notes.write", args: { text: "milk" } }] }]))),
        Effect.scoped
      )
      assert.deepStrictEqual(calls, [])

      // Second process over the same files: the owed run is followed again; the code still works.
      yield* Effect.gen(function* () {
        const store = yield* ChannelStore.ChannelStore
        assert.strictEqual((yield* store.listWatches("tg")).length, 1)
        const router = yield* ChannelRouter.ChannelRouter
        yield* router.handle(message({ text: `/approve ${code}` }))
        const all = yield* eventually(texts(), (t) => t.includes("Noted."), "the reply")
        assert.deepStrictEqual(calls, [{ text: "milk" }])
        // the prompt was replayed on resubscription but not sent twice (same idempotency key)
        assert.strictEqual(approvalPrompt(all).length, 1)
        assert.strictEqual(all.filter((t) => t === "Noted.").length, 1)
        yield* eventually(store.listWatches("tg"), (w) => w.length === 0, "the watch to end")
        const runs = yield* Effect.flatMap(Gateway.Gateway, (g) => g.listRuns(Caller.operator("op"), {}))
        assert.deepStrictEqual(
          runs.map((r) => r.state),
          ["Done"]
        )
      }).pipe(Effect.provide(env(ScriptedModel.make([{ text: "Noted." }]))), Effect.scoped)
    }).pipe(Effect.scoped)
  )

  it.live("a message still in the coalescer at shutdown is handed to the Gateway, and answered once after", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      const files = { journal: join(dir, "journal.db"), channels: join(dir, "channels.db") }
      const env = (model: ScriptedModel.ScriptedModel) =>
        channelsEnv({
          channels: [{ name: "tg", coalesce: { window: "1 hour" } }],
          model,
          journal: SqliteJournal.layer({ filename: files.journal }),
          store: SqliteChannelStore.layer({ filename: files.channels })
        })
      const m = message({ text: "are you there" })
      yield* Effect.gen(function* () {
        yield* Effect.flatMap(Pairing.Pairing, (p) =>
          p.bind(operator, { identity: { channel: "tg", account: "bot1", senderId: "1001" }, principal: "alice" })
        )
        const router = yield* ChannelRouter.ChannelRouter
        const outcome = yield* router.handle(m)
        assert.isTrue(outcome._tag === "Admitted" && outcome.buffered)
        // stop now: the message is still in the 1-hour window
      }).pipe(
        Effect.provide(env(ScriptedModel.make(() => ({ text: ["never", "done"], delayPerDelta: "1 hour" })))),
        Effect.scoped
      )
      yield* Effect.gen(function* () {
        const router = yield* ChannelRouter.ChannelRouter
        // a platform retry after the restart is still a duplicate
        assert.deepStrictEqual(yield* router.handle(m), { _tag: "Rejected", reason: "duplicate" })
        const store = yield* ChannelStore.ChannelStore
        yield* eventually(store.listWatches("tg"), (w) => w.length === 0, "the owed run to be answered")
        const answers = yield* texts()
        // Either the run had not started (it resumes and answers) or it was in progress when the
        // process stopped (it is failed as interrupted, and the chat is told): one answer either way.
        assert.strictEqual(answers.length, 1)
        assert.include(["you there? yes.", "Sorry, that did not work (interrupted)."], answers[0])
      }).pipe(Effect.provide(env(ScriptedModel.make([{ text: "you there? yes." }]))), Effect.scoped)
    }).pipe(Effect.scoped)
  )
})
