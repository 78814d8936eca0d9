/**
 * The AI SDK adapter against real clients: `@ai-sdk/openai-compatible` and `@ai-sdk/openai` talk
 * HTTP to a small OpenAI chat-completions server started here on 127.0.0.1 (SSE chunks, tool-call
 * deltas, usage, error statuses). Plus the AI SDK's own mock model for finish reasons and usage.
 */

import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { createOpenAI } from "@ai-sdk/openai"
import { createOpenAICompatible } from "@ai-sdk/openai-compatible"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { simulateReadableStream } from "ai"
import { MockLanguageModelV4 } from "ai/test"
import { Chunk, Effect, Fiber, Schedule, Schema, Stream } from "effect"
import * as Fetch from "../src/adapters/ai-sdk/Fetch.js"
import { AiSdkModel } from "../src/ai-sdk.js"
import { Caller, Gateway, type ModelProvider, Tool } from "../src/index.js"
import { Models } from "../src/models.js"
import { collect, gatewayLayer } from "../src/testing.js"

type Reply =
  | { readonly kind: "stream"; readonly chunks: ReadonlyArray<Record<string, unknown>> }
  | { readonly kind: "status"; readonly status: number; readonly body?: string }
  | { readonly kind: "hang"; readonly first: Record<string, unknown> }

interface FakeServer {
  readonly url: string
  readonly requests: Array<Record<string, unknown>>
  readonly closedEarly: Array<boolean>
  close(): Promise<void>
}

const delta = (d: Record<string, unknown>, finish: string | null = null) => ({
  id: "chatcmpl-1",
  object: "chat.completion.chunk",
  created: 1,
  model: "test-model",
  choices: [{ index: 0, delta: d, finish_reason: finish }]
})
const usage = (prompt: number, completion: number) => ({
  id: "chatcmpl-1",
  object: "chat.completion.chunk",
  created: 1,
  model: "test-model",
  choices: [],
  usage: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion }
})
const textReply = (parts: ReadonlyArray<string>, u: [number, number] = [11, 7]): Reply => ({
  kind: "stream",
  chunks: [
    delta({ role: "assistant", content: "" }),
    ...parts.map((p) => delta({ content: p })),
    delta({}, "stop"),
    usage(...u)
  ]
})
const toolReply = (id: string, name: string, args: string): Reply => ({
  kind: "stream",
  chunks: [
    delta({ role: "assistant", content: null }),
    delta({ tool_calls: [{ index: 0, id, type: "function", function: { name, arguments: args.slice(0, 4) } }] }),
    delta({ tool_calls: [{ index: 0, function: { arguments: args.slice(4) } }] }),
    delta({}, "tool_calls"),
    usage(20, 9)
  ]
})

/** An OpenAI chat-completions server that plays `replies` in order (the last one repeats). */
const startServer = (replies: Array<Reply>): Promise<FakeServer> => {
  const requests: Array<Record<string, unknown>> = []
  const closedEarly: Array<boolean> = []
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = ""
    req.on("data", (d) => (body += d))
    req.on("end", () => {
      requests.push(JSON.parse(body || "{}"))
      const reply = replies.length > 1 ? replies.shift()! : replies[0]!
      const index = closedEarly.length
      closedEarly.push(false)
      res.on("close", () => {
        if (!res.writableFinished) closedEarly[index] = true
      })
      if (reply.kind === "status") {
        res.writeHead(reply.status, { "content-type": "application/json" })
        res.end(reply.body ?? JSON.stringify({ error: { message: `status ${reply.status}`, type: "test" } }))
        return
      }
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" })
      if (reply.kind === "hang") {
        res.write(`data: ${JSON.stringify(reply.first)}\n\n`)
        return // never ends: the client has to abort
      }
      for (const c of reply.chunks) res.write(`data: ${JSON.stringify(c)}\n\n`)
      res.end("data: [DONE]\n\n")
    })
  })
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo
      resolve({
        url: `http://127.0.0.1:${port}/v1`,
        requests,
        closedEarly,
        close: () =>
          new Promise<void>((r) => {
            server.closeAllConnections()
            server.close(() => r())
          })
      })
    })
  )
}

const withServer = <A, E>(replies: Array<Reply>, f: (server: FakeServer) => Effect.Effect<A, E>) =>
  Effect.acquireUseRelease(
    Effect.promise(() => startServer(replies)),
    f,
    (s) => Effect.promise(() => s.close())
  )

/** The `fetch` the providers below use: the global one, or `Fetch.make`'s (what `Models` gives them). */
let currentFetch: typeof fetch | undefined
const withFetch = () => (currentFetch === undefined ? {} : { fetch: currentFetch })

const compatible = (server: FakeServer, options: AiSdkModel.Options = {}) =>
  AiSdkModel.make(
    createOpenAICompatible({ name: "local", baseURL: server.url, includeUsage: true, ...withFetch() }).chatModel(
      "test-model"
    ),
    { retry: { baseDelay: "5 millis", maxDelay: "20 millis" }, ...options }
  )

const events = (model: ModelProvider.Service, text = "hi") =>
  Stream.runCollect(model.stream({ messages: [{ role: "user", text }], tools: [] })).pipe(
    Effect.map(Chunk.toReadonlyArray)
  )

const double = Tool.make("math.double", {
  description: "Double a number",
  parameters: Schema.Struct({ x: Schema.Number }),
  risk: "low",
  execute: ({ x }) => Effect.succeed({ doubled: x * 2 })
})

describe.each([
  { via: "global fetch", makeFetch: (): typeof fetch | undefined => undefined },
  { via: "undici request (Fetch.make)", makeFetch: () => Fetch.make({}) }
])("AiSdkModel over real AI SDK clients and a local OpenAI-compatible server ($via)", ({ makeFetch }) => {
  beforeAll(() => {
    currentFetch = makeFetch()
  })
  afterAll(() => {
    currentFetch = undefined
  })

  it.live("streams an answer with usage and finish reason", () =>
    withServer([textReply(["Hel", "lo", "!"])], (server) =>
      Effect.gen(function* () {
        const got = yield* events(compatible(server))
        assert.deepStrictEqual(got, [
          { type: "text-delta", text: "Hel" },
          { type: "text-delta", text: "lo" },
          { type: "text-delta", text: "!" },
          { type: "usage", inputTokens: 11, outputTokens: 7 },
          { type: "finish", reason: "stop" }
        ])
        assert.strictEqual(server.requests[0]!.stream, true)
      })
    )
  )

  it.live("drives a multi-step tool loop through Palyra's AgentLoop; the SDK never executes the tool", () =>
    withServer([toolReply("call_1", "math_double", '{"x":21}'), textReply(["It is ", "42."])], (server) =>
      Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const { events } = yield* gateway.startRun(Caller.user("alice"), { text: "double 21" })
        const seen = yield* collect(events)
        const result = seen.find((e) => e._tag === "ToolResult")
        assert.strictEqual(result?._tag === "ToolResult" && result.output, '{"doubled":42}')
        const final = seen.filter((e) => e._tag === "AssistantMessage").at(-1)
        assert.strictEqual(final?._tag === "AssistantMessage" && final.text, "It is 42.")
        assert.strictEqual(server.requests.length, 2)
        const tools = server.requests[0]!.tools as Array<{ function: { name: string } }>
        assert.deepStrictEqual(
          tools.map((t) => t.function.name),
          ["math_double"]
        )
        const second = server.requests[1]!.messages as Array<Record<string, unknown>>
        const toolMessage = second.find((m) => m.role === "tool")
        assert.strictEqual(toolMessage?.content, '{"doubled":42}')
        // The call id sent back is Palyra's own (the tape's ToolCallId), consistent within the conversation.
        const assistant = second.find((m) => m.role === "assistant") as { tool_calls: Array<{ id: string }> }
        assert.strictEqual(toolMessage?.tool_call_id, assistant.tool_calls[0]!.id)
        const usage = seen.filter((e) => e._tag === "Usage")
        assert.strictEqual(usage.length, 2)
      }).pipe(Effect.provide(gatewayLayer({ model: compatible(server), tools: [double] })))
    )
  )

  // The adapter keeps each message's provider form (the conversation's messages are the same objects
  // call after call): a session's later calls must still send the whole conversation, in order.
  it.live("a session's later turns send its whole conversation, the earlier messages as they were", () =>
    withServer([textReply(["first ", "answer"]), textReply(["second answer"]), textReply(["third"])], (server) =>
      Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const alice = Caller.user("alice")
        for (const text of ["one", "two", "three"]) {
          const { events } = yield* gateway.startRun(alice, { text, key: "k" })
          yield* collect(events)
        }
        assert.strictEqual(server.requests.length, 3)
        const sent = server.requests.map((r) =>
          (r.messages as Array<{ role: string; content: unknown }>).map((m) => [m.role, m.content])
        )
        assert.deepStrictEqual(sent[0], [["user", "one"]])
        assert.deepStrictEqual(sent[1], [
          ["user", "one"],
          ["assistant", "first answer"],
          ["user", "two"]
        ])
        assert.deepStrictEqual(sent[2], [...sent[1]!, ["assistant", "second answer"], ["user", "three"]])
      }).pipe(Effect.provide(gatewayLayer({ model: compatible(server) })))
    )
  )

  it.live("a 429 is retried with backoff, then succeeds", () =>
    withServer([{ kind: "status", status: 429 }, { kind: "status", status: 429 }, textReply(["ok"])], (server) =>
      Effect.gen(function* () {
        const got = yield* events(compatible(server))
        assert.strictEqual(got[0]?.type === "text-delta" && got[0].text, "ok")
        assert.strictEqual(server.requests.length, 3)
      })
    )
  )

  it.live("a 401 is not retried and fails with a typed auth error", () =>
    withServer([{ kind: "status", status: 401 }], (server) =>
      Effect.gen(function* () {
        const error = yield* Effect.flip(events(compatible(server)))
        assert.strictEqual(error._tag, "ProviderError")
        assert.strictEqual(error.reason, "auth")
        assert.strictEqual(error.retryable, false)
        assert.strictEqual(error.status, 401)
        assert.strictEqual(server.requests.length, 1)
      })
    )
  )

  it.live("fails over to the second model after the first keeps failing", () =>
    withServer([{ kind: "status", status: 503 }], (bad) =>
      withServer([textReply(["from ", "backup"])], (good) =>
        Effect.gen(function* () {
          const model = AiSdkModel.failover([
            compatible(bad, { retry: { times: 2, baseDelay: "1 millis" } }),
            compatible(good)
          ])
          const got = yield* events(model)
          assert.deepStrictEqual(
            got.filter((e) => e.type === "text-delta").map((e) => (e.type === "text-delta" ? e.text : "")),
            ["from ", "backup"]
          )
          assert.strictEqual(bad.requests.length, 3) // first try + 2 retries
          assert.strictEqual(good.requests.length, 1)
        })
      )
    )
  )

  it.live("cancellation aborts the HTTP request: the server sees the connection closed", () =>
    withServer([{ kind: "hang", first: delta({ role: "assistant", content: "partial" }) }], (server) =>
      Effect.gen(function* () {
        const received: Array<string> = []
        const fiber = yield* Effect.fork(
          Stream.runForEach(compatible(server).stream({ messages: [{ role: "user", text: "hi" }], tools: [] }), (e) =>
            Effect.sync(() => received.push(e.type))
          )
        )
        // Poll with a real delay: a tight Effect loop would starve the socket events we wait for.
        yield* Effect.sync(() => received.length).pipe(
          Effect.repeat({ schedule: Schedule.spaced("5 millis"), until: (n) => n > 0 })
        )
        yield* Fiber.interrupt(fiber)
        yield* Effect.sync(() => server.closedEarly[0]).pipe(
          Effect.repeat({ schedule: Schedule.spaced("5 millis"), until: (closed) => closed === true }),
          Effect.timeout("5 seconds")
        )
        assert.isTrue(server.closedEarly[0])
        assert.deepStrictEqual(received, ["text-delta"])
      })
    )
  )

  it.live("works with @ai-sdk/openai's chat client too", () =>
    withServer([textReply(["via ", "openai"])], (server) =>
      Effect.gen(function* () {
        const model = AiSdkModel.make(
          createOpenAI({ baseURL: server.url, apiKey: "test-key", ...withFetch() }).chat("test-model")
        )
        const got = yield* events(model)
        assert.deepStrictEqual(
          got.filter((e) => e.type === "text-delta").map((e) => (e.type === "text-delta" ? e.text : "")),
          ["via ", "openai"]
        )
        assert.strictEqual(got.at(-1)?.type === "finish" && got.at(-1)?.type, "finish")
      })
    )
  )

  it.live("an unreachable server is a retryable network error", () =>
    Effect.gen(function* () {
      // A port that was just free: connecting is refused.
      const closed = yield* Effect.promise(() => startServer([textReply(["x"])]))
      yield* Effect.promise(() => closed.close())
      const model = AiSdkModel.make(
        createOpenAICompatible({ name: "down", baseURL: closed.url, ...withFetch() }).chatModel("m"),
        {
          retry: { times: 1, baseDelay: "1 millis" }
        }
      )
      const error = yield* Effect.flip(events(model))
      assert.strictEqual(error.reason, "network")
      assert.isTrue(error.retryable)
    })
  )
})

describe("AiSdkModel with the AI SDK's mock model", () => {
  const mock = (finishReason: string, input: number, output: number) =>
    new MockLanguageModelV4({
      doStream: async () => ({
        stream: simulateReadableStream({
          chunks: [
            { type: "text-start", id: "t" },
            { type: "text-delta", id: "t", delta: "cut" },
            { type: "text-end", id: "t" },
            {
              type: "finish",
              finishReason: { unified: finishReason, raw: finishReason },
              usage: {
                inputTokens: { total: input, noCache: input, cacheRead: undefined, cacheWrite: undefined },
                outputTokens: { total: output, text: output, reasoning: undefined }
              }
            }
          ] as never
        })
      })
    })

  for (const reason of ["stop", "length", "content-filter", "tool-calls", "other"] as const) {
    it.live(`maps finish reason "${reason}" and usage`, () =>
      Effect.gen(function* () {
        const got = yield* events(AiSdkModel.make(mock(reason, 3, 5)))
        assert.deepStrictEqual(got.slice(-2), [
          { type: "usage", inputTokens: 3, outputTokens: 5 },
          { type: "finish", reason }
        ])
      })
    )
  }
})

describe("system messages in a request", () => {
  it.live(
    "join the instructions (the AI SDK refuses them among messages): a summary or injected memory reaches the model",
    () =>
      Effect.gen(function* () {
        const prompts: Array<unknown> = []
        const model = new MockLanguageModelV4({
          doStream: async (options) => {
            prompts.push(options.prompt)
            return {
              stream: simulateReadableStream({
                chunks: [
                  { type: "text-start", id: "t" },
                  { type: "text-delta", id: "t", delta: "ok" },
                  { type: "text-end", id: "t" },
                  {
                    type: "finish",
                    finishReason: { unified: "stop", raw: "stop" },
                    usage: {
                      inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
                      outputTokens: { total: 1, text: 1, reasoning: undefined }
                    }
                  }
                ] as never
              })
            }
          }
        })
        const got = yield* Stream.runCollect(
          AiSdkModel.make(model).stream({
            instructions: "Be brief.",
            messages: [
              { role: "system", text: '<memory untrusted="true">- [fact] port 5433</memory>' },
              { role: "user", text: "which port?" }
            ],
            tools: []
          })
        ).pipe(Effect.map(Chunk.toReadonlyArray))
        assert.deepStrictEqual(got.at(-1), { type: "finish", reason: "stop" })
        const [prompt] = prompts as Array<Array<{ role: string; content: unknown }>>
        assert.deepStrictEqual(prompt![0], {
          role: "system",
          content: 'Be brief.\n\n<memory untrusted="true">- [fact] port 5433</memory>'
        })
        assert.deepStrictEqual(
          prompt!.slice(1).map((m) => m.role),
          ["user"]
        )
      })
  )
})

describe("Models.fromSpec", () => {
  it.effect("parses the supported specs and names a missing key", () =>
    Effect.gen(function* () {
      assert.deepStrictEqual(yield* Models.parse("openai:gpt-4.1-mini"), { provider: "openai", model: "gpt-4.1-mini" })
      assert.deepStrictEqual(yield* Models.parse("openai-compatible:http://127.0.0.1:11434/v1#llama3.2"), {
        provider: "openai-compatible",
        baseURL: "http://127.0.0.1:11434/v1",
        model: "llama3.2"
      })
      const missing = yield* Effect.flip(Models.fromSpec("openai:gpt-4.1-mini", {}))
      assert.match(missing.message, /OPENAI_API_KEY/)
      const bad = yield* Effect.flip(Models.parse("nope"))
      assert.strictEqual(bad._tag, "InvalidArgument")
      const demo = yield* Models.fromSpec("demo:scripted", {})
      assert.strictEqual(demo.name, "demo:scripted")
      const chain = yield* Models.fromSpecs("demo:scripted, openai-compatible:http://127.0.0.1:1/v1#m", {})
      assert.strictEqual(chain.name, "demo:scripted > openai-compatible:http://127.0.0.1:1/v1#m")
    })
  )
})
