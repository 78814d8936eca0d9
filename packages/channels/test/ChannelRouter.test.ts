import { assert, describe, it } from "@effect/vitest"
import { Caller, Gateway, type ModelProvider, ScriptedModel, Tool } from "@palyra/core"
import { Effect, Either, Schema } from "effect"
import { ChannelRouter, ChannelStore, Pairing, SessionKey } from "../src/index.js"
import { channelsEnv, counts, eventually, message, operator, texts } from "./support/env.js"

const lastUser = (request: ModelProvider.ModelRequest) => {
  const users = request.messages.filter((m) => m.role === "user")
  const last = users.at(-1)
  return last?.role === "user" ? last.text : ""
}
const echo = () => ScriptedModel.make((request) => ({ text: `echo: ${lastUser(request)}` }))
const off = { window: 0 } as const

const router = ChannelRouter.ChannelRouter
const pairAs = (principal: string, senderId: string, channel = "tg") =>
  Effect.flatMap(Pairing.Pairing, (p) =>
    p.bind(operator, { identity: { channel, account: "bot1", senderId }, principal })
  )

describe("ChannelRouter: every rejection has its stable code and is counted", () => {
  it.live("channel, duplicate, length, content, sender, DM, mention, broadcast, queue and gateway rules", () => {
    const model = ScriptedModel.make(() => ({ text: ["slow", "answer"], delayPerDelta: "1 hour" }))
    const channels = [
      { name: "tg", maxTextChars: 50, denyFrom: ["666", "@mallory"], coalesce: off, mentionPatterns: ["@bot"] },
      { name: "off", enabled: false },
      { name: "nodm", dmPolicy: "deny" as const, coalesce: off },
      { name: "vip", allowFrom: ["1001"], coalesce: off },
      { name: "strict", broadcast: "deny" as const, mentionPatterns: ["@bot"], coalesce: off },
      { name: "busy", maxConcurrent: 1, maxQueue: 1, coalesce: off },
      { name: "small", coalesce: off }
    ]
    return Effect.gen(function* () {
      yield* pairAs("alice", "1001")
      yield* pairAs("alice", "1001", "busy")
      yield* pairAs("alice", "1001", "small")
      const r = yield* router
      const reason = (m: ReturnType<typeof message>) =>
        Effect.map(r.handle(m), (o) => (o._tag === "Rejected" ? o.reason : o._tag))

      assert.strictEqual(yield* reason(message({ channel: "off" })), "channel_disabled")
      assert.strictEqual(yield* reason(message({ channel: "nowhere" })), "channel_disabled")
      const first = message({ text: "x".repeat(51) })
      assert.strictEqual(yield* reason(first), "too_long")
      assert.strictEqual(yield* reason(first), "duplicate")
      assert.strictEqual(yield* reason(message({ text: "  \n " })), "empty")
      assert.strictEqual(yield* reason(message({ sender: { id: "1001", verified: false } })), "unverified_sender")
      assert.strictEqual(yield* reason(message({ from: "666" })), "sender_denied")
      assert.strictEqual(
        yield* reason(message({ sender: { id: "5", handle: "Mallory", verified: true } })),
        "sender_denied"
      )
      assert.strictEqual(yield* reason(message({ channel: "vip", from: "1002" })), "sender_denied")
      assert.strictEqual(yield* reason(message({ channel: "nodm" })), "dm_denied")
      assert.strictEqual(yield* reason(message({ from: "2002" })), "not_paired")
      const group = { isDirect: false, conversation: "g1" }
      assert.strictEqual(yield* reason(message({ ...group, text: "me@bot.example hi" })), "not_mentioned")
      assert.strictEqual(yield* reason(message({ ...group, text: "@everyone hi" })), "broadcast_denied")
      assert.strictEqual(yield* reason(message({ ...group, text: "@bot hi", from: "2002" })), "not_paired")
      assert.strictEqual(
        yield* reason(message({ ...group, channel: "strict", text: "@bot @here look" })),
        "broadcast_denied"
      )
      assert.strictEqual(yield* reason(message({ ...group, text: "@bot hi" })), "Admitted")
      assert.strictEqual(yield* reason(message({ ...group, text: "@bot @everyone hi" })), "Admitted")

      // busy: one run going (its model never finishes), one waiting, the third is refused
      assert.strictEqual(yield* reason(message({ channel: "busy", text: "one" })), "Admitted")
      yield* eventually(r.stats("busy"), (s) => s.active === 1, "the first run to take the slot")
      assert.strictEqual(yield* reason(message({ channel: "busy", text: "two" })), "Admitted")
      assert.strictEqual(yield* reason(message({ channel: "busy", text: "three" })), "Admitted")
      assert.deepStrictEqual(yield* counts("busy"), { queue_full: 1 })

      assert.strictEqual(yield* Effect.map(r.receive("tg", { text: "not a message" }), (o) => o._tag), "Rejected")

      // the Gateway's own limit (10 characters here) refuses; the sender is told
      assert.strictEqual(yield* reason(message({ channel: "small", text: "longer than ten" })), "Admitted")
      yield* eventually(counts("small"), (c) => c.gateway_refused === 1, "the gateway refusal")

      assert.deepStrictEqual(yield* counts("tg"), {
        too_long: 1,
        duplicate: 1,
        empty: 1,
        unverified_sender: 1,
        sender_denied: 2,
        not_paired: 2,
        not_mentioned: 1,
        broadcast_denied: 1,
        malformed: 1
      })
      assert.deepStrictEqual(yield* counts("off"), { channel_disabled: 1 })
      assert.deepStrictEqual(yield* counts("nowhere"), { channel_disabled: 1 })
      assert.deepStrictEqual(yield* counts("nodm"), { dm_denied: 1 })
      assert.deepStrictEqual(yield* counts("vip"), { sender_denied: 1 })
      assert.deepStrictEqual(yield* counts("strict"), { broadcast_denied: 1 })
      // Rejected messages never reached the model: only the admitted ones did.
      assert.isFalse(model.prompts.some((p) => /x{51}|me@bot|@everyone hi|@here look/.test(JSON.stringify(p))))
      // Broadcasts are stripped from what the model sees under `mentionOnly`.
      yield* eventually(
        Effect.sync(() => model.prompts.length),
        (n) => n >= 2,
        "two prompts"
      )
      assert.isTrue(model.prompts.some((p) => lastUser(p) === "@bot hi"))
      assert.isFalse(model.prompts.some((p) => lastUser(p).includes("@everyone")))
    }).pipe(Effect.provide(channelsEnv({ channels, model, maxMessageChars: 10 })), Effect.scoped)
  })
})

describe("ChannelRouter: pairing from a DM", () => {
  it.live("an unpaired sender gets one polite hint; wrong codes lock out; the right code pairs; nothing leaks", () => {
    const model = echo()
    const channels = [{ name: "tg", coalesce: off, pairing: { maxFailures: 3 } }]
    return Effect.gen(function* () {
      const pairing = yield* Pairing.Pairing
      const r = yield* router
      // only an operator (or alice herself) may mint for alice; the reserved prefix is refused
      const denied = yield* Effect.either(pairing.mint(Caller.user("bob"), { channel: "tg", principal: "alice" }))
      assert.isTrue(Either.isLeft(denied) && denied.left._tag === "PermissionDenied")
      const reserved = yield* Effect.either(pairing.mint(operator, { channel: "tg", principal: "channel:tg:x:y" }))
      assert.isTrue(Either.isLeft(reserved) && reserved.left._tag === "InvalidArgument")
      const unknown = yield* Effect.either(pairing.mint(operator, { channel: "nope", principal: "alice" }))
      assert.isTrue(Either.isLeft(unknown) && unknown.left._tag === "NotFound")
      const minted = yield* pairing.mint(Caller.user("alice"), { channel: "tg" })
      assert.match(minted.code, /^[0-9A-HJKMNP-TV-Z]{8}$/)

      // a stranger: one hint however much they write
      yield* r.handle(message({ from: "9", text: "hello?" }))
      yield* r.handle(message({ from: "9", text: "anyone there?" }))
      const hints = (yield* texts("dm-9")).filter((t) => t.includes("pairing code"))
      assert.strictEqual(hints.length, 1)

      // mallory guesses: 3 wrong codes lock her out, then even the right code is refused
      const wrong = minted.code === "00000000" ? "11111111" : "00000000"
      for (let i = 0; i < 3; i++) {
        const o = yield* r.handle(message({ from: "666", text: wrong }))
        assert.deepStrictEqual(o, { _tag: "Rejected", reason: "pairing_failed" })
      }
      const locked = yield* r.handle(message({ from: "666", text: minted.code }))
      assert.deepStrictEqual(locked, { _tag: "Rejected", reason: "locked_out" })
      assert.match((yield* texts("dm-666")).at(-1)!, /Too many wrong codes/)

      // alice sends the code (lower case, with a hyphen: still hers) and is paired
      const typed = `${minted.code.slice(0, 4).toLowerCase()}-${minted.code.slice(4)}`
      const paired = yield* r.handle(message({ from: "1001", text: typed }))
      assert.deepStrictEqual(paired, { _tag: "Paired", principal: "alice" })
      // single use
      assert.deepStrictEqual(yield* r.handle(message({ from: "1002", text: minted.code })), {
        _tag: "Rejected",
        reason: "pairing_failed"
      })
      // now she chats as alice, and gets exactly one answer
      const admitted = yield* r.handle(message({ from: "1001", text: "what is my name" }))
      assert.strictEqual(admitted._tag, "Admitted")
      yield* eventually(texts("dm-1001"), (t) => t.some((x) => x === "echo: what is my name"), "the reply")
      const sessions = yield* Effect.flatMap(Gateway.Gateway, (g) => g.listSessions(operator))
      assert.deepStrictEqual(
        sessions.map((s) => s.principal),
        ["alice"]
      )
      // the stranger's and mallory's words never reached the model
      assert.isFalse(model.prompts.some((p) => /anyone there|hello\?/.test(JSON.stringify(p))))

      // revoked: back to strangers
      const revoked = yield* pairing.revoke(Caller.user("alice"), { channel: "tg", account: "bot1", senderId: "1001" })
      assert.isNotNull(revoked.revokedAt)
      assert.deepStrictEqual(yield* r.handle(message({ from: "1001", text: "still there?" })), {
        _tag: "Rejected",
        reason: "not_paired"
      })
      const c = yield* counts()
      assert.strictEqual(c.pairing_failed, 4)
      assert.strictEqual(c.locked_out, 1)
    }).pipe(Effect.provide(channelsEnv({ channels, model })), Effect.scoped)
  })

  it.live("DM policy allow: each stranger acts as a principal of their own", () => {
    const model = echo()
    return Effect.gen(function* () {
      const r = yield* router
      const a = yield* r.handle(message({ from: "1", text: "a" }))
      const b = yield* r.handle(message({ from: "2", text: "b" }))
      assert.isTrue(a._tag === "Admitted" && b._tag === "Admitted")
      if (a._tag === "Admitted" && b._tag === "Admitted") {
        assert.strictEqual(a.principal, SessionKey.identityPrincipal({ channel: "tg", account: "bot1", senderId: "1" }))
        assert.notStrictEqual(a.principal, b.principal)
      }
      yield* eventually(texts(), (t) => t.length === 2, "two replies")
    }).pipe(
      Effect.provide(channelsEnv({ channels: [{ name: "tg", dmPolicy: "allow", coalesce: off }], model })),
      Effect.scoped
    )
  })
})

describe("ChannelRouter: isolation", () => {
  it.live("two senders in one group get private sessions; neither's prompt holds the other's text", () => {
    const model = echo()
    const channels = [{ name: "tg", coalesce: off, mentionPatterns: ["@bot"] }]
    return Effect.gen(function* () {
      // Both are the same principal: only the session key keeps them apart.
      yield* pairAs("team", "1")
      yield* pairAs("team", "2")
      const r = yield* router
      const group = { isDirect: false, conversation: "g1" }
      const a = yield* r.handle(message({ ...group, from: "1", text: "@bot my secret is apple" }))
      const b = yield* r.handle(message({ ...group, from: "2", text: "@bot my secret is banana" }))
      yield* eventually(texts("g1"), (t) => t.length === 2, "two replies")
      yield* r.handle(message({ ...group, from: "1", text: "@bot what was my secret?" }))
      yield* eventually(texts("g1"), (t) => t.length === 3, "three replies")
      assert.isTrue(a._tag === "Admitted" && b._tag === "Admitted" && a.sessionKey !== b.sessionKey)
      const sessions = yield* Effect.flatMap(Gateway.Gateway, (g) => g.listSessions(operator))
      assert.strictEqual(sessions.length, 2)
      assert.strictEqual(model.prompts.length, 3)
      for (const p of model.prompts) {
        const all = JSON.stringify(p.messages)
        assert.isFalse(all.includes("apple") && all.includes("banana"), all)
      }
      // sender 1's second prompt carries their own history, not sender 2's
      const third = JSON.stringify(model.prompts[2]!.messages)
      assert.include(third, "apple")
      assert.notInclude(third, "banana")
    }).pipe(Effect.provide(channelsEnv({ channels, model })), Effect.scoped)
  })

  it.live("with isolation off, the same principal shares the conversation's session", () => {
    const model = echo()
    const channels = [{ name: "tg", coalesce: off, isolateSessionBySender: false, requireMention: false }]
    return Effect.gen(function* () {
      yield* pairAs("team", "1")
      yield* pairAs("team", "2")
      const r = yield* router
      const a = yield* r.handle(message({ isDirect: false, conversation: "g1", from: "1", text: "one" }))
      const b = yield* r.handle(message({ isDirect: false, conversation: "g1", from: "2", text: "two" }))
      assert.isTrue(a._tag === "Admitted" && b._tag === "Admitted" && a.sessionKey === b.sessionKey)
      yield* eventually(texts("g1"), (t) => t.length === 2, "two replies")
      assert.strictEqual((yield* Effect.flatMap(Gateway.Gateway, (g) => g.listSessions(operator))).length, 1)
    }).pipe(Effect.provide(channelsEnv({ channels, model })), Effect.scoped)
  })
})

describe("ChannelRouter: agents", () => {
  it.live("bindings pick the agent of a conversation's new session; each agent answers with its own model", () => {
    const model = echo()
    const ops = ScriptedModel.make(() => ({ text: "ops here" }), { name: "ops" })
    const channels = [{ name: "tg", dmPolicy: "allow" as const, coalesce: off }]
    const kernel = {
      agents: [{ id: "ops", model: ops, instructions: "You run operations." }],
      bindings: [{ channel: "tg", conversation: "ops-room", agent: "ops" }]
    }
    return Effect.gen(function* () {
      const r = yield* router
      yield* r.handle(message({ from: "1", conversation: "ops-room", text: "status?" }))
      yield* r.handle(message({ from: "2", text: "hello" }))
      yield* eventually(texts("ops-room"), (t) => t.length === 1, "the ops reply")
      yield* eventually(texts("dm-2"), (t) => t.length === 1, "the default reply")
      assert.deepStrictEqual(yield* texts("ops-room"), ["ops here"])
      assert.deepStrictEqual(yield* texts("dm-2"), ["echo: hello"])
      const sessions = yield* Effect.flatMap(Gateway.Gateway, (g) => g.listSessions(operator))
      assert.deepStrictEqual(sessions.map((s) => s.agentId).sort(), ["default", "ops"])
      assert.deepStrictEqual(
        ops.prompts.map((p) => p.instructions),
        ["You run operations."]
      )
    }).pipe(Effect.provide(channelsEnv({ channels, model, kernel })), Effect.scoped)
  })
})

describe("ChannelRouter: replies, commands and approvals", () => {
  it.live("one answer per message, with the prefix, split at the channel's limit, even when delivered twice", () => {
    const long = `${"word ".repeat(1000)}end`
    const model = ScriptedModel.make([{ text: long }])
    return Effect.gen(function* () {
      yield* pairAs("alice", "1001")
      const r = yield* router
      const m = message({ text: "tell me a lot" })
      yield* r.handle(m)
      assert.deepStrictEqual(yield* r.handle(m), { _tag: "Rejected", reason: "duplicate" })
      const store = yield* ChannelStore.ChannelStore
      const parts = yield* eventually(store.listDeliveries({}), (ds) => ds.length >= 2, "the reply")
      assert.strictEqual(parts.length, 2)
      assert.isTrue(parts[0]!.text.startsWith("[bot] word"))
      assert.isTrue(parts.every((d) => d.text.length <= 4000))
      assert.deepStrictEqual(
        parts.map((d) => d.part),
        ["reply:0", "reply:1"]
      )
      assert.strictEqual(new Set(parts.map((d) => d.key)).size, 2)
      assert.strictEqual(parts[0]!.replyTo, m.platformMessageId)
      assert.strictEqual(model.prompts.length, 1)
    }).pipe(
      Effect.provide(channelsEnv({ channels: [{ name: "tg", coalesce: off, responsePrefix: "[bot] " }], model })),
      Effect.scoped
    )
  })

  it.live("quick successive messages become one run (real clock, short window)", () => {
    const model = echo()
    return Effect.gen(function* () {
      yield* pairAs("alice", "1001")
      const r = yield* router
      const a = yield* r.handle(message({ text: "first" }))
      const b = yield* r.handle(message({ text: "second" }))
      assert.isTrue(a._tag === "Admitted" && a.buffered && b._tag === "Admitted" && b.buffered)
      yield* eventually(texts(), (t) => t.length === 1, "one reply")
      assert.strictEqual(model.prompts.length, 1)
      assert.strictEqual(lastUser(model.prompts[0]!), "first\nsecond")
    }).pipe(
      Effect.provide(channelsEnv({ channels: [{ name: "tg", coalesce: { window: "150 millis" } }], model })),
      Effect.scoped
    )
  })

  it.live("commands act through the Gateway as the sender: /whoami, /status, /stop, /reset, /help", () => {
    const model = ScriptedModel.make(() => ({ text: ["never", "ends"], delayPerDelta: "1 hour" }))
    return Effect.gen(function* () {
      yield* pairAs("alice", "1001")
      const r = yield* router
      const reply = (text: string) =>
        Effect.gen(function* () {
          const before = (yield* texts()).length
          const o = yield* r.handle(message({ text }))
          assert.strictEqual(o._tag, "Command")
          const all = yield* eventually(texts(), (t) => t.length > before, text)
          return all.at(-1)!
        })
      assert.match(yield* reply("/whoami"), /You are alice \(paired\), sender 1001 on tg/)
      assert.strictEqual(yield* reply("/status"), "Nothing is running.")
      yield* r.handle(message({ text: "do a long thing" }))
      const gateway = yield* Gateway.Gateway
      const running = yield* eventually(
        gateway.listRuns(operator, {}),
        (runs) => runs.some((x) => x.state === "InProgress"),
        "a run in progress"
      )
      assert.match(yield* reply("/status"), /1 run\(s\) going: InProgress/)
      assert.strictEqual(yield* reply("/stop"), "Stopped 1 run(s).")
      const stopped = yield* gateway.getRun(operator, running[0]!.id)
      assert.strictEqual(stopped.state, "Cancelled")
      assert.match(yield* reply("/reset"), /fresh conversation/)
      assert.match(yield* reply("/help"), /\/approve <code>/)
      // another sender's /stop cannot reach alice's runs: it acts on their own session
      yield* r.handle(message({ text: "again" }))
      yield* eventually(gateway.listRuns(operator, {}), (runs) => runs.some((x) => x.state === "InProgress"), "run")
      yield* pairAs("bob", "1002")
      yield* r.handle(message({ from: "1002", text: "/stop" }))
      const bobSays = yield* eventually(texts("dm-1002"), (t) => t.length === 1, "bob's answer")
      assert.strictEqual(bobSays[0], "Nothing is running.")
      assert.isTrue((yield* gateway.listRuns(operator, {})).some((x) => x.state === "InProgress"))
    }).pipe(Effect.provide(channelsEnv({ channels: [{ name: "tg", coalesce: off }], model })), Effect.scoped)
  })

  it.live("a sensitive tool is approved from the chat with /approve <code>; nobody else can use the code", () => {
    const calls: Array<unknown> = []
    const write = Tool.make("notes.write", {
      description: "write a note",
      parameters: Schema.Struct({ text: Schema.String }),
      risk: "sensitive",
      execute: (args) => Effect.sync(() => void calls.push(args)).pipe(Effect.as({ ok: true }))
    })
    const model = ScriptedModel.make([
      { toolCalls: [{ name: "notes.write", args: { text: "remember milk" } }] },
      { text: "Noted." }
    ])
    const channels = [{ name: "tg", coalesce: off, mentionPatterns: ["@bot"] }]
    return Effect.gen(function* () {
      yield* pairAs("alice", "1")
      yield* pairAs("bob", "2")
      const r = yield* router
      const group = { isDirect: false, conversation: "g1" }
      yield* r.handle(message({ ...group, from: "1", text: "@bot note: milk" }))
      const prompt = yield* eventually(texts("g1"), (t) => t.some((x) => x.startsWith("Approval needed")), "prompt")
      const code = /\/approve ([0-9A-Z]{6})/.exec(prompt.find((x) => x.startsWith("Approval needed"))!)![1]!
      assert.deepStrictEqual(calls, [])
      // bob, in the same group, cannot approve alice's call: the Gateway says it does not exist
      yield* r.handle(message({ ...group, from: "2", text: `/approve ${code}` }))
      const bobs = yield* eventually(texts("g1"), (t) => t.some((x) => x.startsWith("No approval")), "bob's answer")
      assert.include(bobs.at(-1)!, code)
      // a wrong code answers the same
      yield* r.handle(message({ ...group, from: "1", text: "/approve ZZZZZZ" }))
      // alice approves (lower case works)
      yield* r.handle(message({ ...group, from: "1", text: `/approve ${code.toLowerCase()}` }))
      const after = yield* eventually(texts("g1"), (t) => t.includes("Noted."), "the final answer")
      assert.include(after, "Approved.")
      assert.deepStrictEqual(calls, [{ text: "remember milk" }])
      const approvals = yield* Effect.flatMap(Gateway.Gateway, (g) => g.listApprovals(operator, {}))
      assert.strictEqual(approvals[0]!.status, "approved")
      assert.strictEqual(approvals[0]!.resolver, "alice")
      // answering again: already answered
      yield* r.handle(message({ ...group, from: "1", text: `/deny ${code}` }))
      yield* eventually(texts("g1"), (t) => t.at(-1) === "That approval was already answered or has expired.", "reply")
    }).pipe(Effect.provide(channelsEnv({ channels, model, tools: [write] })), Effect.scoped)
  })
})
