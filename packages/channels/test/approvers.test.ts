import { assert, describe, it } from "@effect/vitest"
import { Caller, Gateway, type ModelProvider, ScriptedModel, Tool } from "@palyra/core"
import { Effect, Schema } from "effect"
import { ChannelRouter, Pairing } from "../src/index.js"
import { channelsEnv, eventually, message, operator, texts } from "./support/env.js"

const lastUser = (request: ModelProvider.ModelRequest) => {
  const last = request.messages.filter((m) => m.role === "user").at(-1)
  return last?.role === "user" ? last.text : ""
}
const off = { window: 0 } as const
const pair = (senderId: string, principal: string) =>
  Effect.flatMap(Pairing.Pairing, (p) =>
    p.bind(operator, { identity: { channel: "tg", account: "bot1", senderId }, principal })
  )
const send = (m: ReturnType<typeof message>) => Effect.flatMap(ChannelRouter.ChannelRouter, (r) => r.handle(m))
const codeIn = (all: ReadonlyArray<string>) =>
  /\/approve ([0-9A-Z]{6})/.exec(all.find((t) => t.startsWith("Approval needed"))!)![1]!

describe("approvals from a chat: each conversation gets and answers only its own session's approvals", () => {
  it.live("two principals in two DMs, and two senders of one principal in a group", () => {
    const calls: Array<unknown> = []
    const write = Tool.make("notes.write", {
      description: "write a note",
      parameters: Schema.Struct({ text: Schema.String }),
      risk: "sensitive",
      execute: (args) => Effect.sync(() => void calls.push(args)).pipe(Effect.as({ ok: true }))
    })
    const model = ScriptedModel.make((request) =>
      request.messages.at(-1)?.role === "tool"
        ? { text: `Noted for ${lastUser(request).slice(-5)}.` }
        : { toolCalls: [{ name: "notes.write", args: { text: lastUser(request) } }] }
    )
    return Effect.gen(function* () {
      yield* pair("1001", "alice")
      yield* pair("2002", "bob")
      yield* send(message({ from: "1001", text: "note alice" }))
      yield* send(message({ from: "2002", text: "note bob" }))
      const aliceChat = yield* eventually(
        texts("dm-1001"),
        (t) => t.some((x) => x.startsWith("Approval needed")),
        "alice's prompt"
      )
      const bobChat = yield* eventually(
        texts("dm-2002"),
        (t) => t.some((x) => x.startsWith("Approval needed")),
        "bob's prompt"
      )
      // each prompt reached its own conversation only
      assert.strictEqual(aliceChat.filter((t) => t.startsWith("Approval needed")).length, 1)
      assert.strictEqual(bobChat.filter((t) => t.startsWith("Approval needed")).length, 1)
      assert.include(aliceChat.find((t) => t.startsWith("Approval needed"))!, "note alice")
      assert.notInclude(aliceChat.join("\n"), "note bob")
      const bobCode = codeIn(bobChat)

      // alice cannot answer bob's approval from her chat, even knowing its code
      yield* send(message({ from: "1001", text: `/approve ${bobCode}` }))
      const refused = yield* eventually(texts("dm-1001"), (t) => t.some((x) => x.startsWith("No approval")), "refusal")
      assert.match(refused.at(-1)!, /No approval is waiting with code/)
      assert.deepStrictEqual(calls, [])
      // bob can
      yield* send(message({ from: "2002", text: `/approve ${bobCode}` }))
      yield* eventually(texts("dm-2002"), (t) => t.includes("Noted for e bob."), "bob's answer")
      assert.deepStrictEqual(calls, [{ text: "note bob" }])

      // a group: two senders paired as one principal ("team"), isolated sessions
      yield* pair("3003", "team")
      yield* pair("4004", "team")
      const group = { isDirect: false, conversation: "g1" }
      yield* send(message({ ...group, from: "3003", text: "@bot note three" }))
      const groupChat = yield* eventually(texts("g1"), (t) => t.some((x) => x.startsWith("Approval needed")), "prompt")
      const code = codeIn(groupChat)
      // the other sender sees the prompt in the group, but it is not theirs to answer
      yield* send(message({ ...group, from: "4004", text: `/approve ${code}` }))
      yield* eventually(texts("g1"), (t) => t.some((x) => x.startsWith("No approval")), "refusal in the group")
      assert.deepStrictEqual(calls, [{ text: "note bob" }])
      yield* send(message({ ...group, from: "3003", text: `/approve ${code}` }))
      yield* eventually(texts("g1"), (t) => t.includes("Noted for three."), "the answer in the group")
      assert.deepStrictEqual(calls, [{ text: "note bob" }, { text: "@bot note three" }])
      // alice's approval is still waiting for her, untouched
      const pending = yield* Effect.flatMap(Gateway.Gateway, (g) =>
        g.listApprovals(Caller.operator("op"), { status: "pending" })
      )
      assert.deepStrictEqual(
        pending.map((a) => [a.principal, a.status]),
        [["alice", "pending"]]
      )
    }).pipe(
      Effect.provide(
        channelsEnv({
          model,
          tools: [write],
          channels: [{ name: "tg", coalesce: off, mentionPatterns: ["@bot"] }]
        })
      )
    )
  })
})
