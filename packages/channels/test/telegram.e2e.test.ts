import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { type Gateway, type ModelProvider, ScriptedModel, Tool } from "@palyra/core"
import { gatewayLayer } from "@palyra/core/testing"
import Database from "better-sqlite3"
import { Effect, Layer, Schema } from "effect"
import { ChannelConfig, ChannelStore, Channels, Pairing, SqliteChannelStore } from "../src/index.js"
import { counts, eventually, operator } from "./support/env.js"
import * as BotApi from "./support/TelegramBotApi.js"
import { tempDir } from "./support/tmp.js"

const TOKEN = "4242:TEST-token-abcdefghijklmnopqrstuvwxyz"
const BOT = { id: 4242, username: "palyra_test_bot", first_name: "Palyra" }
const alice = { id: 1001, username: "alice" }
const bob = { id: 2002, username: "bob" }
const mallory = { id: 3003, username: "mallory" }

const lastUser = (request: ModelProvider.ModelRequest) => {
  const last = request.messages.filter((m) => m.role === "user").at(-1)
  return last?.role === "user" ? last.text : ""
}

/** The real channel layer (Telegram connector via grammY, SQLite store) over the real kernel. */
const channelsLayer = (
  api: BotApi.TelegramBotApi,
  filename: string,
  model: ScriptedModel.ScriptedModel,
  entry: Record<string, unknown> = {},
  tools: ReadonlyArray<Tool.AnyTool> = []
) => {
  const decoded = Schema.decodeUnknownSync(ChannelConfig.Entries)([
    {
      kind: "telegram",
      name: "tg",
      bot_token: TOKEN,
      api_root: api.apiRoot,
      poll_timeout_seconds: 1,
      coalesce_ms: 0,
      pairing_max_failures: 3,
      ...entry
    }
  ])
  const kernel = gatewayLayer({ model, tools }) as Layer.Layer<Gateway.Gateway>
  return Channels.layer({ channels: decoded, store: { filename }, outbox: { pollInterval: "50 millis" } }).pipe(
    Layer.provideMerge(kernel)
  )
}

const sentTo = (api: BotApi.TelegramBotApi, chat: number) => api.sent.filter((m) => m.chat_id === chat)
const waitSent = (api: BotApi.TelegramBotApi, chat: number, ok: (texts: Array<string>) => boolean, what: string) =>
  eventually(
    Effect.sync(() => sentTo(api, chat).map((m) => m.text)),
    ok,
    what
  )

/** The outbox's deliveries once none is still in flight (polled with a real delay, bounded). */
const allSent = (store: ChannelStore.Service) =>
  Effect.gen(function* () {
    for (let i = 0; i < 250; i++) {
      const deliveries = yield* store.listDeliveries({})
      if (deliveries.every((d) => d.state !== "pending" && d.state !== "unknown")) return deliveries
      yield* Effect.sleep("20 millis")
    }
    return yield* store.listDeliveries({})
  })

describe("Telegram through grammY against a local Bot API server", () => {
  it.live(
    "pairing end to end: a hint for strangers, wrong codes lock out, the right code pairs, chat, approve a sensitive tool",
    () =>
      Effect.gen(function* () {
        const api = yield* BotApi.make({ token: TOKEN, bot: BOT })
        const dir = yield* tempDir
        const filename = join(dir, "channels.sqlite")
        const calls: Array<unknown> = []
        const write = Tool.make("notes.write", {
          description: "write a note",
          parameters: Schema.Struct({ text: Schema.String }),
          risk: "sensitive",
          execute: (args) => Effect.sync(() => void calls.push(args)).pipe(Effect.as({ ok: true }))
        })
        const model = ScriptedModel.make((request, i) =>
          lastUser(request).includes("note")
            ? request.messages.at(-1)?.role === "tool"
              ? { text: "Noted: milk." }
              : { toolCalls: [{ name: "notes.write", args: { text: "milk" } }] }
            : { text: `(${i}) you said: ${lastUser(request)}` }
        )
        yield* Effect.gen(function* () {
          // grammY asked who it is, dropped any webhook, and is long polling
          const methods = () => api.calls.map((c) => c.method)
          yield* eventually(Effect.sync(methods), (m) => m.includes("getUpdates"), "polling")
          assert.includeMembers(methods(), ["getMe", "deleteWebhook"])

          const minted = yield* Effect.flatMap(Pairing.Pairing, (p) =>
            p.mint(operator, { channel: "tg", principal: "alice" })
          )

          // a stranger gets one polite hint, however often they write
          api.push(BotApi.textMessage(bob, "hello?"))
          yield* waitSent(api, bob.id, (t) => t.length === 1, "the hint")
          api.push(BotApi.textMessage(bob, "anyone?"))
          yield* eventually(counts(), (c) => c.not_paired === 2, "the second not_paired")
          assert.strictEqual(sentTo(api, bob.id).length, 1)
          assert.match(sentTo(api, bob.id)[0]!.text, /pairing code/)

          // mallory: three wrong codes lock her out; then even the right code is refused, silently
          const wrong = minted.code === "ZZZZZZZZ" ? "YYYYYYYY" : "ZZZZZZZZ"
          for (let i = 1; i <= 3; i++) {
            api.push(BotApi.textMessage(mallory, wrong))
            yield* waitSent(api, mallory.id, (t) => t.length === i, `answer ${i} to a wrong code`)
          }
          assert.match(sentTo(api, mallory.id)[2]!.text, /Too many wrong codes/)
          api.push(BotApi.textMessage(mallory, minted.code))
          yield* eventually(counts(), (c) => c.locked_out === 1, "the lockout")
          assert.strictEqual(sentTo(api, mallory.id).length, 3)

          // alice pairs with the code (via the /start deep-link form)
          api.push(BotApi.textMessage(alice, `/start ${minted.code}`))
          const paired = yield* waitSent(api, alice.id, (t) => t.length === 1, "the pairing answer")
          assert.match(paired[0]!, /Paired\. You are now talking to this assistant as alice/)

          // chat: one answer, replying to her message
          const hi = BotApi.textMessage(alice, "hi there")
          api.push(hi)
          const chat = yield* waitSent(api, alice.id, (t) => t.length === 2, "the answer")
          assert.match(chat[1]!, /you said: hi there/)
          assert.strictEqual(sentTo(api, alice.id)[1]!.reply_to, hi.message.message_id)

          // the same message delivered again (a platform retry in a new update): no second run
          api.push({ message: hi.message })
          yield* eventually(counts(), (c) => c.duplicate === 1, "the duplicate")
          assert.strictEqual(model.prompts.length, 1)

          // a sensitive tool asks for approval in the chat; alice approves with the code
          api.push(BotApi.textMessage(alice, "take a note: milk"))
          const prompt = yield* waitSent(api, alice.id, (t) => t.some((x) => x.startsWith("Approval needed")), "prompt")
          const code = /\/approve ([0-9A-Z]{6})/.exec(prompt.at(-1)!)![1]!
          assert.deepStrictEqual(calls, [])
          api.push(BotApi.textMessage(alice, `/approve ${code}`))
          const done = yield* waitSent(api, alice.id, (t) => t.includes("Noted: milk."), "the final answer")
          assert.include(done, "Approved.")
          assert.deepStrictEqual(calls, [{ text: "milk" }])

          // /whoami answers as the paired principal
          api.push(BotApi.textMessage(alice, "/whoami"))
          const who = yield* waitSent(api, alice.id, (t) => t.some((x) => x.startsWith("You are")), "whoami")
          assert.match(who.at(-1)!, /You are alice \(paired\), sender 1001 on tg/)

          // strangers' words never reached the model
          assert.isFalse(model.prompts.some((p) => /hello\?|anyone\?|ZZZZZZZZ|YYYYYYYY/.test(JSON.stringify(p))))
          // every delivery is marked sent, with Telegram's message id
          const store = yield* ChannelStore.ChannelStore
          // The platform can see the last message a moment before the outbox records it as sent.
          const deliveries = yield* allSent(store)
          assert.isTrue(
            deliveries.length > 0 && deliveries.every((d) => d.state === "sent" && d.platformMessageId !== null)
          )
        }).pipe(Effect.provide(channelsLayer(api, filename, model, {}, [write])))

        // the binding is durable: it is in the file after the layer closed
        const db = new Database(filename, { readonly: true })
        const rows = db.prepare("SELECT sender_id, principal FROM bindings").all()
        db.close()
        assert.deepStrictEqual(rows, [{ sender_id: "1001", principal: "alice" }])
      }).pipe(Effect.scoped)
  )

  it.live(
    "webhook mode: the secret token is checked, the same update twice is one run and one reply, group senders are isolated",
    () =>
      Effect.gen(function* () {
        const api = yield* BotApi.make({ token: TOKEN, bot: BOT })
        const dir = yield* tempDir
        const model = ScriptedModel.make((request) => ({ text: `ok: ${lastUser(request)}` }))
        const secret = "s3cret-token-for-tests"
        yield* Effect.gen(function* () {
          const webhookSet = yield* eventually(
            Effect.sync(() => api.calls.find((c) => c.method === "setWebhook")),
            (c) => c !== undefined,
            "setWebhook"
          )
          assert.strictEqual(webhookSet!.params.secret_token, secret)
          const pairing = yield* Pairing.Pairing
          // Both senders act as one principal: only the per-sender session key separates them.
          for (const id of ["1", "2"]) {
            yield* pairing.bind(operator, {
              identity: { channel: "tg", account: "4242", senderId: id },
              principal: "team"
            })
          }
          const group = { id: -100123, type: "supergroup" as const, title: "Team" }
          const mention = (text: string) => ({ entities: [{ type: "mention", offset: 0, length: 16 }], text })
          const a = BotApi.textMessage({ id: 1 }, "", group, mention("@palyra_test_bot my secret is apple"))
          const b = BotApi.textMessage({ id: 2 }, "", group, mention("@palyra_test_bot my secret is banana"))
          const c = BotApi.textMessage({ id: 3 }, "just chatting, no mention", group)
          // a forged secret: 401, counted, nothing else
          assert.strictEqual(yield* Effect.promise(() => api.postToWebhook({ update_id: 999, ...a }, "wrong")), 401)
          assert.strictEqual(yield* Effect.promise(() => api.postToWebhook({ update_id: 998, ...a }, undefined)), 401)
          assert.strictEqual((yield* counts()).bad_signature, 2)
          // the same update delivered twice (Telegram retries webhooks)
          const first = { update_id: 1, ...a }
          assert.strictEqual(yield* Effect.promise(() => api.postToWebhook(first, secret)), 200)
          assert.strictEqual(yield* Effect.promise(() => api.postToWebhook(first, secret)), 200)
          api.push(b)
          api.push(c)
          const texts = yield* waitSent(api, group.id, (t) => t.length === 2, "two replies")
          yield* eventually(counts(), (x) => x.not_mentioned === 1 && x.duplicate === 1, "counts")
          assert.sameMembers(texts, [
            "ok: @palyra_test_bot my secret is apple",
            "ok: @palyra_test_bot my secret is banana"
          ])
          assert.strictEqual(model.prompts.length, 2)
          for (const p of model.prompts) {
            const all = JSON.stringify(p.messages)
            assert.isFalse(all.includes("apple") && all.includes("banana"))
          }
        }).pipe(
          Effect.provide(
            channelsLayer(api, join(dir, "channels.sqlite"), model, {
              mode: "webhook",
              webhook_secret: secret,
              listen_port: 0
            })
          )
        )
      }).pipe(Effect.scoped)
  )

  it.live("replies: split at 4,096, a 429's retry_after is honoured, each part sent once and in order", () =>
    Effect.gen(function* () {
      const api = yield* BotApi.make({ token: TOKEN, bot: BOT })
      const dir = yield* tempDir
      const paragraph = `${"lorem ipsum ".repeat(300).trim()}\n\n`
      const model = ScriptedModel.make([{ text: paragraph.repeat(3).trim() }])
      yield* Effect.gen(function* () {
        yield* Effect.flatMap(Pairing.Pairing, (p) =>
          p.bind(operator, { identity: { channel: "tg", account: "4242", senderId: "1001" }, principal: "alice" })
        )
        api.failNext("sendMessage", {
          error_code: 429,
          description: "Too Many Requests: retry after 1",
          parameters: { retry_after: 1 }
        })
        api.push(BotApi.textMessage(alice, "tell me everything"))
        const parts = yield* waitSent(api, alice.id, (t) => t.length === 3, "three parts")
        const refused = api.calls.filter((c) => c.method === "sendMessage")
        assert.strictEqual(refused.length, 4) // one refused with 429, then three delivered
        assert.isTrue(parts.every((p) => p.length <= 4096))
        assert.deepStrictEqual(parts.join("\n\n"), paragraph.repeat(3).trim())
        // the retry waited for retry_after (1 s) after the 429
        const firstSent = api.sent[0]!.at
        const refusedAt = yield* ChannelStore.ChannelStore.pipe(
          Effect.flatMap((s) => s.listDeliveries({})),
          Effect.map((ds) => ds[0]!.createdAt)
        )
        assert.isAtLeast(firstSent - refusedAt, 1000)
        const deliveries = yield* Effect.flatMap(ChannelStore.ChannelStore, allSent)
        assert.deepStrictEqual(
          deliveries.map((d) => [d.part, d.state, d.attempts]),
          [
            ["reply:0", "sent", 2],
            ["reply:1", "sent", 1],
            ["reply:2", "sent", 1]
          ]
        )
      }).pipe(Effect.provide(channelsLayer(api, join(dir, "channels.sqlite"), model)))
    }).pipe(Effect.scoped)
  )

  it.live("after a crash, a delivery in state unknown is not re-sent (Telegram cannot tell); a pending one is", () =>
    Effect.gen(function* () {
      const api = yield* BotApi.make({ token: TOKEN, bot: BOT })
      const dir = yield* tempDir
      const filename = join(dir, "channels.sqlite")
      // The previous process: one delivery was being sent when it died, one was never tried.
      yield* Effect.scoped(
        Effect.gen(function* () {
          const store = yield* SqliteChannelStore.make({ filename })
          const base = {
            channel: "tg",
            account: "4242",
            conversation: "1001",
            thread: null,
            replyTo: null,
            sessionId: null,
            runId: null,
            createdAt: Date.now()
          }
          yield* store.enqueue([
            { ...base, key: "k-unknown", part: "reply:0", text: "was in flight" },
            { ...base, key: "k-pending", part: "reply:1", text: "never tried" }
          ])
          yield* store.updateDelivery("k-unknown", { state: "unknown", attempts: 1 }, Date.now())
        })
      )
      yield* Effect.gen(function* () {
        yield* waitSent(api, 1001, (t) => t.length === 1, "the pending delivery")
        const store = yield* ChannelStore.ChannelStore
        const unknown = yield* eventually(
          store.listDeliveries({ state: "unknown" }),
          (ds) => ds.length === 1 && ds[0]!.error !== null,
          "the reconcile mark"
        )
        assert.match(unknown[0]!.error!, /not re-sent/)
        assert.deepStrictEqual(
          api.sent.map((m) => m.text),
          ["never tried"]
        )
      }).pipe(Effect.provide(channelsLayer(api, filename, ScriptedModel.make([]))))
    }).pipe(Effect.scoped)
  )

  it.live("a bad bot token fails at start-up with a ConnectorError, and the token is not in its message", () =>
    Effect.gen(function* () {
      const api = yield* BotApi.make({ token: TOKEN, bot: BOT })
      const dir = yield* tempDir
      const wrong = "4242:WRONG-token-abcdefghijklmnopqrstuvwxyz"
      const layer = Channels.layer({
        channels: Schema.decodeUnknownSync(ChannelConfig.Entries)([
          { kind: "telegram", name: "tg", bot_token: wrong, api_root: api.apiRoot }
        ]),
        store: { filename: join(dir, "channels.sqlite") }
      }).pipe(Layer.provide(gatewayLayer({ model: ScriptedModel.make([]) }) as Layer.Layer<Gateway.Gateway>))
      const exit = yield* Effect.exit(Effect.scoped(Layer.build(layer)))
      assert.isTrue(exit._tag === "Failure")
      const text = String(exit._tag === "Failure" ? JSON.stringify(exit.cause) : "")
      assert.include(text, "ConnectorError")
      assert.notInclude(text, "WRONG-token")
    }).pipe(Effect.scoped)
  )
})
