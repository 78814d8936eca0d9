import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { type Gateway, type ModelProvider, ScriptedModel, Tool } from "@palyra/core"
import { gatewayLayer } from "@palyra/core/testing"
import { Effect, Layer, Redacted, Schema } from "effect"
import * as Slack from "../src/connectors/Slack.js"
import { ChannelConfig, ChannelStore, Channels, Pairing, SqliteChannelStore } from "../src/index.js"
import { counts, eventually, operator } from "./support/env.js"
import * as SlackApi from "./support/SlackApi.js"
import { tempDir } from "./support/tmp.js"

const TOKEN = "xoxb-1111-2222-TESTtokenABCDEF"
const SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
const BOT = { userId: "U0BOT", teamId: "T0001", botId: "B0BOT" }

const lastUser = (request: ModelProvider.ModelRequest) => {
  const last = request.messages.filter((m) => m.role === "user").at(-1)
  return last?.role === "user" ? last.text : ""
}

/** The real channel layer (Slack connector, SQLite store) over the real kernel. */
const channelsLayer = (
  api: SlackApi.SlackApi,
  filename: string,
  model: ScriptedModel.ScriptedModel,
  tools: ReadonlyArray<Tool.AnyTool> = []
) => {
  const decoded = Schema.decodeUnknownSync(ChannelConfig.Entries)([
    {
      kind: "slack",
      name: "slack",
      signing_secret: SECRET,
      bot_token: TOKEN,
      api_root: api.apiRoot,
      listen_port: 0,
      coalesce_ms: 0
    }
  ])
  const kernel = gatewayLayer({ model, tools }) as Layer.Layer<Gateway.Gateway>
  return Channels.layer({ channels: decoded, store: { filename }, outbox: { pollInterval: "50 millis" } }).pipe(
    Layer.provideMerge(kernel)
  )
}

const inboundUrl = Effect.map(Channels.Connectors, (all) => all.get("slack")!.inboundUrl!)
const postedTo = (api: SlackApi.SlackApi, channel: string) => api.posted.filter((m) => m.channel === channel)
const waitPosted = (
  api: SlackApi.SlackApi,
  channel: string,
  ok: (p: Array<SlackApi.Posted>) => boolean,
  what: string
) =>
  eventually(
    Effect.sync(() => postedTo(api, channel)),
    ok,
    what
  )

const setup = <A, E, R>(
  body: (api: SlackApi.SlackApi, url: string, model: ScriptedModel.ScriptedModel) => Effect.Effect<A, E, R>,
  tools: ReadonlyArray<Tool.AnyTool> = [],
  script?: ScriptedModel.ScriptedModel
) =>
  Effect.gen(function* () {
    const api = yield* SlackApi.make({ token: TOKEN, signingSecret: SECRET, bot: BOT })
    const dir = yield* tempDir
    const model = script ?? ScriptedModel.make((request, i) => ({ text: `(${i}) you said: ${lastUser(request)}` }))
    return yield* Effect.flatMap(inboundUrl, (url) => body(api, url, model)).pipe(
      Effect.provide(channelsLayer(api, join(dir, "channels.sqlite"), model, tools))
    )
  }).pipe(Effect.scoped)

describe("Slack events as InboundMessage candidates", () => {
  const bot = { userId: "U0BOT", teamId: "T1" }
  const base = { type: "message", channel: "C1", channel_type: "channel", user: "U1", ts: "1700000000.000100" }
  it("reads mentions, broadcasts, threads, files and commands; ignores bots, our own messages and edits", () => {
    const c = Slack.toCandidate("slack", bot, {
      ...base,
      text: "<@U0BOT|palyra> &lt;b&gt; &amp; <!here> see <@W22>",
      thread_ts: "1699999999.000001",
      files: [{ id: "F1", name: "a.png", mimetype: "image/png", size: 12 }, { id: "F2" }]
    }) as Record<string, unknown>
    assert.deepStrictEqual(c.mentions, ["u0bot", "@here", "w22"])
    assert.strictEqual(c.text, "<b> & @here see @W22")
    assert.strictEqual(c.thread, "1699999999.000001")
    assert.strictEqual(c.platformMessageId, "C1:1700000000.000100")
    assert.strictEqual(c.account, "T1")
    assert.isFalse(c.isDirect)
    assert.deepStrictEqual(c.attachments, [
      { kind: "image", id: "F1", name: "a.png", mimeType: "image/png", size: 12 },
      { kind: "file", id: "F2" }
    ])
    const text = (t: string) => (Slack.toCandidate("slack", bot, { ...base, text: t }) as { text: string }).text
    assert.strictEqual(text("!approve K7Q2XM"), "/approve K7Q2XM")
    assert.strictEqual(text("!important: read this"), "!important: read this")
    for (const ignored of [
      { ...base, user: "U0BOT", text: "our own" },
      { ...base, bot_id: "B9", text: "a bot" },
      { ...base, subtype: "message_changed", text: "an edit" },
      { ...base, subtype: "channel_join", text: "joined" },
      { ...base, type: "reaction_added" }
    ]) {
      assert.strictEqual(Slack.toCandidate("slack", bot, ignored), "ignore")
    }
  })
})

describe("Slack through the Events API and @slack/web-api against a local Slack API server", () => {
  it.live("a forged or expired signature is 401 and nothing is stored beyond a counter", () =>
    setup((api, url, model) =>
      Effect.gen(function* () {
        const store = yield* ChannelStore.ChannelStore
        const event = SlackApi.messageEvent({ user: "U1", text: "hello", channel: "D1" })
        const now = Math.floor(Date.now() / 1000)
        const forged = yield* Effect.promise(() => api.deliver(url, event, { secret: "not-the-signing-secret-000000" }))
        const garbage = yield* Effect.promise(() => api.deliver(url, event, { signature: "v0=abc" }))
        const stale = yield* Effect.promise(() => api.deliver(url, event, { timestamp: now - 6 * 60 }))
        const future = yield* Effect.promise(() => api.deliver(url, event, { timestamp: now + 6 * 60 }))
        assert.deepStrictEqual([forged.status, garbage.status, stale.status, future.status], [401, 401, 401, 401])
        const c = yield* counts("slack")
        assert.deepStrictEqual(c, { bad_signature: 2, stale_signature: 2 })
        // Nothing else: the message id was never claimed (a genuine delivery still goes through).
        assert.isTrue(yield* store.claimInbound("slack", `D1:${event.event.ts}`, Date.now()))
        assert.deepStrictEqual(yield* store.listDeliveries({}), [])
        assert.strictEqual(model.prompts.length, 0)
        assert.deepStrictEqual(
          api.calls.map((x) => x.method),
          ["auth.test"]
        )
      })
    )
  )

  it.live("url_verification answers the challenge (signed); an unsigned one is refused", () =>
    setup((api, url) =>
      Effect.gen(function* () {
        const payload = {
          token: "x",
          challenge: "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
          type: "url_verification"
        }
        const ok = yield* Effect.promise(() => api.deliver(url, payload))
        assert.strictEqual(ok.status, 200)
        assert.deepStrictEqual(JSON.parse(ok.body), { challenge: payload.challenge })
        const forged = yield* Effect.promise(() => api.deliver(url, payload, { signature: `v0=${"0".repeat(64)}` }))
        assert.strictEqual(forged.status, 401)
      })
    )
  )

  it.live(
    "pairing in a DM, then a threaded reply over chat.postMessage, mentions in a channel, and an approval from the chat",
    () => {
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
      return setup(
        (api, url) =>
          Effect.gen(function* () {
            const deliver = (e: unknown) => Effect.promise(() => api.deliver(url, e))
            const minted = yield* Effect.flatMap(Pairing.Pairing, (p) =>
              p.mint(operator, { channel: "slack", principal: "alice" })
            )
            // an unpaired stranger gets the hint; alice pairs with the code
            const hello = yield* deliver(SlackApi.messageEvent({ user: "U2", text: "hello?", channel: "D2" }))
            assert.strictEqual(hello.status, 200)
            yield* waitPosted(api, "D2", (p) => p.length === 1, "the hint")
            assert.match(postedTo(api, "D2")[0]!.text, /pairing code/)
            yield* deliver(SlackApi.messageEvent({ user: "U1", text: minted.code, channel: "D1" }))
            const paired = yield* waitPosted(api, "D1", (p) => p.length === 1, "the pairing answer")
            assert.match(paired[0]!.text, /Paired\. You are now talking to this assistant as alice/)

            // a DM in a thread: the answer goes to that thread
            const parent = SlackApi.nextTs()
            yield* deliver(SlackApi.messageEvent({ user: "U1", text: "hi there", channel: "D1", threadTs: parent }))
            const chat = yield* waitPosted(api, "D1", (p) => p.length === 2, "the answer")
            assert.match(chat[1]!.text, /you said: hi there/)
            assert.strictEqual(chat[1]!.thread_ts, parent)
            // a DM outside a thread: a plain reply
            yield* deliver(SlackApi.messageEvent({ user: "U1", text: "and again", channel: "D1" }))
            const plain = yield* waitPosted(api, "D1", (p) => p.length === 3, "the second answer")
            assert.isUndefined(plain[2]!.thread_ts)

            // in a channel: only a message that mentions the bot (<@U0BOT>) is answered
            yield* deliver(
              SlackApi.messageEvent({ user: "U1", text: "just chatting", channel: "C1", channelType: "channel" })
            )
            yield* eventually(counts("slack"), (c) => c.not_mentioned === 1, "not_mentioned")
            yield* deliver(
              SlackApi.messageEvent({
                user: "U1",
                text: "<@U0BOT> what time is it?",
                channel: "C1",
                channelType: "channel",
                type: "app_mention"
              })
            )
            const inChannel = yield* waitPosted(api, "C1", (p) => p.length === 1, "the channel answer")
            assert.match(inChannel[0]!.text, /what time is it\?/)

            // our own messages and other bots' are ignored without a word
            yield* deliver(SlackApi.messageEvent({ user: BOT.userId, text: "echo", channel: "D1" }))
            yield* deliver(
              SlackApi.messageEvent({
                user: "U9",
                text: "beep",
                channel: "D1",
                extra: { bot_id: "B9", subtype: "bot_message" }
              })
            )

            // a sensitive tool asks for approval in the chat; alice approves with !approve (Slack keeps "/")
            yield* deliver(SlackApi.messageEvent({ user: "U1", text: "take a note: milk", channel: "D1" }))
            const prompt = yield* waitPosted(
              api,
              "D1",
              (p) => p.some((x) => x.text.startsWith("Approval needed")),
              "the approval prompt"
            )
            // the prompt shows Slack's command form
            const code = /Reply !approve ([0-9A-Z]{6}) or !deny /.exec(prompt.at(-1)!.text)![1]!
            assert.deepStrictEqual(calls, [])
            yield* deliver(SlackApi.messageEvent({ user: "U1", text: `!approve ${code}`, channel: "D1" }))
            const done = yield* waitPosted(
              api,
              "D1",
              (p) => p.some((x) => x.text === "Noted: milk."),
              "the final answer"
            )
            assert.isTrue(done.some((x) => x.text === "Approved."))
            assert.deepStrictEqual(calls, [{ text: "milk" }])
            assert.isFalse(model.prompts.some((p) => /echo|beep|hello\?/.test(JSON.stringify(p))))
          }),
        [write],
        model
      )
    }
  )

  it.live("a 429 from chat.postMessage is honoured: the reply is sent again after Retry-After", () =>
    setup((api, url) =>
      Effect.gen(function* () {
        yield* Effect.flatMap(Pairing.Pairing, (p) =>
          p.bind(operator, { identity: { channel: "slack", account: BOT.teamId, senderId: "U1" }, principal: "alice" })
        )
        api.rateLimitNext("chat.postMessage", 1)
        yield* Effect.promise(() => api.deliver(url, SlackApi.messageEvent({ user: "U1", text: "hi", channel: "D1" })))
        const posted = yield* waitPosted(api, "D1", (p) => p.length === 1, "the reply after the rate limit")
        assert.match(posted[0]!.text, /you said: hi/)
        const attempts = api.calls.filter((c) => c.method === "chat.postMessage")
        assert.strictEqual(attempts.length, 2)
        // Retry-After: 1 second (a little slack for timer granularity)
        assert.isAtLeast(attempts[1]!.at - attempts[0]!.at, 950)
        const store = yield* ChannelStore.ChannelStore
        const deliveries = yield* eventually(
          store.listDeliveries({}),
          (ds) => ds.length === 1 && ds[0]!.state === "sent",
          "the delivery marked sent"
        )
        assert.strictEqual(deliveries[0]!.platformMessageId, `D1:${posted[0]!.ts}`)
      })
    )
  )

  it.live("two senders in one Slack channel get private sessions: neither sees the other's history", () =>
    setup(
      (api, url) =>
        Effect.gen(function* () {
          for (const user of ["U1", "U2"]) {
            yield* Effect.flatMap(Pairing.Pairing, (p) =>
              p.bind(operator, {
                identity: { channel: "slack", account: BOT.teamId, senderId: user },
                principal: "team"
              })
            )
          }
          const say = (user: string, text: string) =>
            Effect.promise(() =>
              api.deliver(
                url,
                SlackApi.messageEvent({ user, text: `<@U0BOT> ${text}`, channel: "C7", channelType: "channel" })
              )
            )
          yield* say("U1", "my secret is apple")
          yield* waitPosted(api, "C7", (p) => p.length === 1, "the first answer")
          yield* say("U2", "my secret is banana")
          yield* waitPosted(api, "C7", (p) => p.length === 2, "the second answer")
          yield* say("U2", "what do you know?")
          const answers = yield* waitPosted(api, "C7", (p) => p.length === 3, "the third answer")
          assert.include(answers[2]!.text, "banana")
          assert.notInclude(answers[2]!.text, "apple")
        }),
      [],
      ScriptedModel.make((request) => ({
        text: `I know: ${request.messages
          .filter((m) => m.role === "user")
          .map((m) => (m.role === "user" ? m.text : ""))
          .join(" | ")}`
      }))
    )
  )

  it.live("Slack markup reaches the model as plain text: our mention gone, @names, #channels, links, broadcasts", () =>
    setup((api, url, model) =>
      Effect.gen(function* () {
        yield* Effect.flatMap(Pairing.Pairing, (p) =>
          p.bind(operator, { identity: { channel: "slack", account: BOT.teamId, senderId: "U1" }, principal: "alice" })
        )
        const event = SlackApi.messageEvent({
          user: "U1",
          text: "<@U0BOT>: <!here> ask <@U123|ana> and <@W22> in <#C5|ops> about <https://example.com/r?a=1&amp;b=2|the runbook> &lt;soon&gt;",
          channel: "C1",
          channelType: "channel",
          type: "app_mention"
        })
        const delivered = yield* Effect.promise(() => api.deliver(url, event))
        assert.strictEqual(delivered.status, 200)
        yield* waitPosted(api, "C1", (p) => p.length === 1, "the answer")
        // The channel's broadcast strategy (mentionOnly) strips the broadcast the converter named.
        assert.strictEqual(
          lastUser(model.prompts[0]!),
          "ask @ana and @W22 in #ops about the runbook (https://example.com/r?a=1&b=2) <soon>"
        )
      })
    )
  )

  it.live("an event Slack retries, and the app_mention twin of a message, are one run and one reply", () =>
    setup((api, url, model) =>
      Effect.gen(function* () {
        yield* Effect.flatMap(Pairing.Pairing, (p) =>
          p.bind(operator, { identity: { channel: "slack", account: BOT.teamId, senderId: "U1" }, principal: "alice" })
        )
        const event = SlackApi.messageEvent({
          user: "U1",
          text: "<@U0BOT> once please",
          channel: "C1",
          channelType: "channel"
        })
        const first = yield* Effect.promise(() => api.deliver(url, event))
        const retry1 = yield* Effect.promise(() => api.deliver(url, event, { retryNum: 1 }))
        const retry2 = yield* Effect.promise(() => api.deliver(url, event, { retryNum: 2 }))
        // Slack sends `message` and `app_mention` for one message, with two event ids
        const twin = {
          ...event,
          event_id: `${event.event_id}x`,
          event: { ...event.event, type: "app_mention" }
        }
        const mention = yield* Effect.promise(() => api.deliver(url, twin))
        assert.deepStrictEqual([first.status, retry1.status, retry2.status, mention.status], [200, 200, 200, 200])
        yield* waitPosted(api, "C1", (p) => p.length === 1, "the reply")
        yield* eventually(counts("slack"), (c) => c.duplicate === 1, "the twin counted as a duplicate")
        yield* Effect.sleep("300 millis")
        assert.strictEqual(postedTo(api, "C1").length, 1)
        assert.strictEqual(model.prompts.length, 1)
      })
    )
  )

  it.live(
    "reconcile: a delivery is found again by its key in message metadata; a whole window without it is resent",
    () =>
      Effect.gen(function* () {
        const api = yield* SlackApi.make({ token: TOKEN, signingSecret: SECRET, bot: BOT })
        const slack = yield* Slack.make({
          channel: "slack",
          signingSecret: Redacted.make(SECRET),
          botToken: Redacted.make(TOKEN),
          apiRoot: api.apiRoot,
          listen: { port: 0 }
        })
        const now = Date.now()
        const out = (key: string, thread: string | null = null, createdAt: number | null = now) => ({
          key,
          account: BOT.teamId,
          conversation: "D1",
          thread,
          replyTo: null,
          text: `text of ${key}`,
          ...(createdAt === null ? {} : { createdAt })
        })
        yield* slack.send(out("k1"))
        yield* slack.send(out("k3", "1700000000.000100"))
        assert.deepStrictEqual(api.posted[0]!.metadata, { event_type: "palyra_delivery", event_payload: { key: "k1" } })
        assert.strictEqual(yield* slack.reconcile(out("k1")), "sent")
        assert.strictEqual(yield* slack.reconcile(out("k3", "1700000000.000100")), "sent")
        assert.strictEqual(yield* slack.reconcile(out("k2")), "resend")
        // without the time it was enqueued, the window is unbounded: never resent blindly
        assert.strictEqual(yield* slack.reconcile(out("k2", null, null)), "unknown")
        // more messages since than one page holds: not sure, so not resent
        for (let i = 0; i < 201; i++) yield* slack.send(out(`other-${i}`))
        assert.strictEqual(yield* slack.reconcile(out("k2")), "unknown")
        assert.strictEqual(yield* slack.reconcile(out("k1")), "unknown")
        // an unknown conversation (an error answer): unknown
        assert.strictEqual(yield* slack.reconcile({ ...out("k1"), conversation: "nope" }), "unknown")
      }).pipe(Effect.scoped)
  )

  it.live("after a crash: an unknown delivery Slack has is marked sent, one it lacks is sent once", () =>
    Effect.gen(function* () {
      const dir = yield* tempDir
      const filename = join(dir, "channels.sqlite")
      const now = Date.now()
      const delivery = (key: string) => ({
        key,
        channel: "slack",
        account: BOT.teamId,
        conversation: "D1",
        thread: null,
        replyTo: null,
        sessionId: null,
        runId: null,
        part: "reply",
        text: `answer ${key}`,
        createdAt: now
      })
      // The previous process: both sends had started when it died.
      yield* Effect.gen(function* () {
        const store = yield* ChannelStore.ChannelStore
        yield* store.enqueue([delivery("k-delivered"), delivery("k-lost")])
        for (const key of ["k-delivered", "k-lost"]) yield* store.updateDelivery(key, { state: "unknown" }, now)
      }).pipe(Effect.provide(SqliteChannelStore.layer({ filename })))
      // Slack got the first one (with its key in the metadata), not the second.
      const api = yield* SlackApi.make({
        token: TOKEN,
        signingSecret: SECRET,
        bot: BOT,
        history: [
          {
            channel: "D1",
            text: "answer k-delivered",
            ts: SlackApi.nextTs(),
            at: now,
            metadata: { event_type: "palyra_delivery", event_payload: { key: "k-delivered" } }
          }
        ]
      })
      const model = ScriptedModel.make([])
      yield* Effect.gen(function* () {
        const store = yield* ChannelStore.ChannelStore
        const deliveries = yield* eventually(
          store.listDeliveries({}),
          (ds) => ds.every((d) => d.state === "sent"),
          "both deliveries settled"
        )
        assert.strictEqual(deliveries.length, 2)
        yield* Effect.sleep("200 millis")
        assert.deepStrictEqual(
          api.posted.map((p) => p.text),
          ["answer k-lost"]
        )
      }).pipe(Effect.provide(channelsLayer(api, filename, model)))
    }).pipe(Effect.scoped)
  )
})
