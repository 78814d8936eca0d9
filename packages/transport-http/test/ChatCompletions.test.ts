/**
 * OpenAI-compatible Chat Completions, exercised with OpenAI's official client against the real
 * server: streamed and whole answers, sessions carried by `user`, approvals resolved over the REST
 * API while the answer streams, a clean end on timeout, and OpenAI-shaped errors.
 */
import { ScriptedModel, Tool } from "@palyra/core"
import { Effect, Schema } from "effect"
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ALICE, json, raw, startServer, type TestServer } from "./fixtures.js"

const writes: Array<unknown> = []
const write = Tool.make("fs.write", {
  description: "write a file",
  parameters: Schema.Struct({ path: Schema.String }),
  risk: "sensitive",
  execute: (args) => Effect.sync(() => writes.push(args))
})
const model = ScriptedModel.make((request) => {
  const last = request.messages.at(-1)
  if (last?.role === "tool") return { text: ["Wrote ", "it."] }
  if (last?.role === "user" && last.text.includes("write")) {
    return { toolCalls: [{ name: "fs.write", args: { path: "a.txt" } }] }
  }
  return { text: ["Hello ", "from ", "Palyra!"], usage: { inputTokens: 7, outputTokens: 3 } }
})

let server: TestServer
let slow: TestServer
const client = (base: string, apiKey = "alice-token") =>
  new OpenAI({ apiKey, baseURL: `${base}/v1`, maxRetries: 0, timeout: 20_000 })

beforeAll(async () => {
  ;[server, slow] = await Promise.all([
    startServer({ model, tools: [write] }),
    startServer({ model, tools: [write], serve: { chatTimeoutSeconds: 1, heartbeatSeconds: 0.2 } })
  ])
})
afterAll(() => Promise.all([server.close(), slow.close()]))

const collect = async (stream: AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>) => {
  const chunks: Array<OpenAI.Chat.Completions.ChatCompletionChunk> = []
  for await (const chunk of stream) chunks.push(chunk)
  return chunks
}
const textOf = (chunks: ReadonlyArray<OpenAI.Chat.Completions.ChatCompletionChunk>) =>
  chunks.map((c) => c.choices[0]?.delta.content ?? "").join("")

describe("POST /v1/chat/completions (official openai client)", () => {
  it("streams an answer in OpenAI's chunk format, ending with data: [DONE]", async () => {
    const stream = await client(server.base).chat.completions.create({
      model: "palyra",
      messages: [{ role: "user", content: "hi" }],
      stream: true,
      stream_options: { include_usage: true },
      user: "streamer"
    })
    const chunks = await collect(stream)
    expect(textOf(chunks)).toBe("Hello from Palyra!")
    expect(chunks[0]?.choices[0]?.delta.role).toBe("assistant")
    const finishing = chunks.filter((c) => c.choices[0]?.finish_reason)
    expect(finishing.map((c) => c.choices[0]?.finish_reason)).toEqual(["stop"])
    expect(chunks.at(-1)?.usage).toEqual({ prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 })
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1)
    expect(chunks.every((c) => c.object === "chat.completion.chunk" && c.model === "palyra")).toBe(true)

    // The wire itself: data-only frames, the last one [DONE].
    const wire = await raw(server.port, "POST", "/v1/chat/completions", {
      headers: ALICE,
      body: JSON.stringify({ model: "m", stream: true, messages: [{ role: "user", content: "hi" }] })
    })
    expect(wire.headers["content-type"]).toMatch(/^text\/event-stream/)
    const frames = wire.body.split("\n\n").filter((f) => f !== "")
    expect(frames.every((f) => f.startsWith("data: "))).toBe(true)
    expect(frames.at(-1)).toBe("data: [DONE]")
  })

  it("answers whole when not streaming, and the same user continues the same session", async () => {
    const openai = client(server.base)
    const first = await openai.chat.completions.create({
      model: "palyra",
      messages: [{ role: "user", content: "remember the word teal" }],
      user: "same-user"
    })
    expect(first.object).toBe("chat.completion")
    expect(first.choices[0]?.message.content).toBe("Hello from Palyra!")
    expect(first.choices[0]?.finish_reason).toBe("stop")
    const before = model.prompts.length
    // Only the last message is sent; the first exchange comes from the session's history.
    await openai.chat.completions.create({
      model: "palyra",
      messages: [
        { role: "user", content: "ignored: this is not sent" },
        { role: "user", content: "what was the word?" }
      ],
      user: "same-user"
    })
    const prompt = model.prompts[before]!.messages.map((m) => `${m.role}: ${"text" in m ? m.text : ""}`)
    expect(prompt).toEqual([
      "user: remember the word teal",
      "assistant: Hello from Palyra!",
      "user: what was the word?"
    ])

    // The model name is recorded on the session the call created.
    const sessions = await json(await fetch(`${server.base}/v1/sessions`, { headers: ALICE }))
    expect(sessions.find((x: { key: string }) => x.key === "same-user")).toMatchObject({ channel: "openai:palyra" })

    // x-palyra-session wins over user.
    const byHeader = model.prompts.length
    await openai.chat.completions.create(
      { model: "palyra", messages: [{ role: "user", content: "fresh" }], user: "same-user" },
      { headers: { "x-palyra-session": "other-session" } }
    )
    expect(model.prompts[byHeader]!.messages).toEqual([{ role: "user", text: "fresh" }])

    // Stateless: a fresh session, with the earlier messages as context.
    const stateless = model.prompts.length
    await openai.chat.completions.create(
      {
        model: "palyra",
        messages: [
          { role: "system", content: "be brief" },
          { role: "user", content: "earlier question" },
          { role: "assistant", content: "earlier answer" },
          { role: "user", content: "now this" }
        ],
        user: "same-user"
      },
      { headers: { "x-palyra-stateless": "true" } }
    )
    const statelessPrompt = model.prompts[stateless]!.messages
    expect(statelessPrompt).toHaveLength(1)
    expect(statelessPrompt[0]).toMatchObject({ role: "user" })
    const text = (statelessPrompt[0] as { text: string }).text
    expect(text).toContain("system: be brief\nuser: earlier question\nassistant: earlier answer")
    expect(text.endsWith("now this")).toBe(true)
  })

  it("a sensitive tool call waits for an approval given over REST; the same stream then completes", async () => {
    const stream = await client(server.base).chat.completions.create({
      model: "palyra",
      messages: [{ role: "user", content: "please write a.txt" }],
      stream: true,
      user: "approver"
    })
    const chunks: Array<OpenAI.Chat.Completions.ChatCompletionChunk> = []
    let approved = ""
    for await (const chunk of stream) {
      chunks.push(chunk)
      const waiting = /\[waiting for approval (\w+) of fs\.write\]/.exec(textOf(chunks))
      if (waiting && approved === "") {
        approved = waiting[1]!
        const response = await fetch(`${server.base}/v1/approvals/${approved}`, {
          method: "POST",
          headers: { ...ALICE, "content-type": "application/json" },
          body: JSON.stringify({ decision: "approve" })
        })
        expect(response.status).toBe(200)
      }
    }
    const text = textOf(chunks)
    expect(approved).not.toBe("")
    expect(text).toContain(`[approval ${approved} approved]`)
    expect(text.endsWith("Wrote it.")).toBe(true)
    expect(chunks.at(-1)?.choices[0]?.finish_reason).toBe("stop")
    expect(writes).toEqual([{ path: "a.txt" }])
  })

  it("a wait past the chat timeout ends the answer cleanly with a notice; the run goes on", async () => {
    const stream = await client(slow.base).chat.completions.create({
      model: "palyra",
      messages: [{ role: "user", content: "write something slowly" }],
      stream: true
    })
    const chunks = await collect(stream)
    const text = textOf(chunks)
    expect(text).toMatch(/\[waiting for approval \w+ of fs\.write\]/)
    expect(text).toMatch(/\[timed out after 1s; run \w+ continues in session \w+\]$/)
    expect(chunks.at(-1)?.choices[0]?.finish_reason).toBe("stop")
    const runId = /run (\w+) continues/.exec(text)![1]
    const run = await json(await fetch(`${slow.base}/v1/runs/${runId}`, { headers: ALICE }))
    expect(run.state).not.toBe("Done")
  })

  it("a server shutting down ends an open answer cleanly with a notice and [DONE]", async () => {
    const closing = await startServer({ model, tools: [write] })
    const stream = await client(closing.base).chat.completions.create({
      model: "palyra",
      messages: [{ role: "user", content: "write during shutdown" }],
      stream: true
    })
    const chunks: Array<OpenAI.Chat.Completions.ChatCompletionChunk> = []
    let closed: Promise<void> | undefined
    for await (const chunk of stream) {
      chunks.push(chunk)
      if (closed === undefined && textOf(chunks).includes("[waiting for approval")) closed = closing.close()
    }
    await closed
    expect(textOf(chunks)).toMatch(/\[the server is shutting down; run \w+ continues in session \w+\]$/)
    expect(chunks.at(-1)?.choices[0]?.finish_reason).toBe("stop")
  })

  it("bad requests get OpenAI-shaped errors with the right status", async () => {
    const openai = client(server.base)
    const noMessages = await openai.chat.completions.create({ model: "palyra", messages: [] }).then(
      () => undefined,
      (error: unknown) => error
    )
    expect(noMessages).toBeInstanceOf(OpenAI.APIError)
    expect((noMessages as InstanceType<typeof OpenAI.APIError>).status).toBe(400)
    expect((noMessages as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({
      type: "invalid_request_error",
      code: "invalid_argument",
      param: "messages"
    })

    const lastNotUser = await openai.chat.completions
      .create({ model: "palyra", messages: [{ role: "assistant", content: "hi" }] })
      .then(
        () => undefined,
        (error: unknown) => error
      )
    expect((lastNotUser as InstanceType<typeof OpenAI.APIError>).status).toBe(400)

    const badKey = await client(server.base, "wrong")
      .chat.completions.create({ model: "palyra", messages: [{ role: "user", content: "hi" }] })
      .then(
        () => undefined,
        (error: unknown) => error
      )
    expect(badKey).toBeInstanceOf(OpenAI.AuthenticationError)
    expect((badKey as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({ type: "authentication_error" })

    for (const body of ["{nope", '{"model":"m","messages":[{"role":"user","content":"hi"}],"user":""}', "[1]"]) {
      const response = await raw(server.port, "POST", "/v1/chat/completions", { headers: ALICE, body })
      expect(response.status).toBe(400)
      expect(JSON.parse(response.body)).toMatchObject({ error: { type: "invalid_request_error" } })
    }
    const badHeader = await raw(server.port, "POST", "/v1/chat/completions", {
      headers: { ...ALICE, "x-palyra-stateless": "maybe" },
      body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] })
    })
    expect(JSON.parse(badHeader.body)).toMatchObject({ error: { param: "x-palyra-stateless" } })
    const tooLarge = await raw(server.port, "POST", "/v1/chat/completions", {
      headers: ALICE,
      body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "x".repeat(100_000) }] })
    })
    expect(tooLarge.status).toBe(413)
    expect(JSON.parse(tooLarge.body)).toMatchObject({ error: { type: "request_too_large" } })
  })
})
