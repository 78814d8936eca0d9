/**
 * The AI SDK adapter's plain sink (`streamToNow`): over a real AI SDK client and a local server
 * speaking the OpenAI chat-completions wire, it hands the sink the same events as `streamTo`, runs
 * an effect the sink returns before the next event, aborts the HTTP request when interrupted, and
 * never calls the sink once the call was interrupted. The agent loop's tape (coalescing, redaction
 * of a key split across deltas, the tool call after its turn's deltas) is the same through it.
 */
import { assert, describe, it } from "@effect/vitest"
import { MockLanguageModelV4 } from "ai/test"
import { Cause, Effect, Exit, Fiber, type Layer, Option, Schedule } from "effect"
import { AiSdkModel } from "../src/ai-sdk.js"
import { Caller, Gateway, type ModelProvider, type TapeEvent } from "../src/index.js"
import { collect, gatewayLayer } from "../src/testing.js"
import { type ChatServer, chunk, usage, withChatServer } from "./chatServer.js"
import { recordingTool } from "./helpers.js"

const text = (parts: ReadonlyArray<string>): ReadonlyArray<string> => [
  chunk({ role: "assistant", content: "" }),
  ...parts.map((p) => chunk({ content: p })),
  chunk({}, "stop"),
  usage(11, 7),
  "data: [DONE]\n\n"
]
const call = (id: string, name: string, args: string, before: ReadonlyArray<string> = []): ReadonlyArray<string> => [
  chunk({ role: "assistant", content: null }),
  ...before.map((p) => chunk({ content: p })),
  chunk({ tool_calls: [{ index: 0, id, type: "function", function: { name, arguments: args.slice(0, 3) } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: args.slice(3) } }] }),
  chunk({}, "tool_calls"),
  usage(20, 9),
  "data: [DONE]\n\n"
]

/** A chat-completions server playing `replies` in order (the last repeats); `hang` writes one delta and never ends. */
const withServer = <A, E>(
  replies: Array<ReadonlyArray<string> | "hang">,
  f: (local: ChatServer) => Effect.Effect<A, E>
) =>
  withChatServer((res) => {
    const reply = replies.length > 1 ? replies.shift()! : replies[0]!
    if (reply === "hang") return void res.write(chunk({ role: "assistant", content: "partial" }))
    res.end(reply.join(""))
  }, f)

const request: ModelProvider.ModelRequest = { messages: [{ role: "user", text: "go" }], tools: [] }

/** The events one call hands a sink, through `streamToNow` (the sink buffering all) and through `streamTo`. */
const both = (model: ModelProvider.Service) =>
  Effect.gen(function* () {
    const now: Array<ModelProvider.ModelEvent> = []
    yield* model.streamToNow!(request, (e) => void now.push(e))
    const to: Array<ModelProvider.ModelEvent> = []
    yield* model.streamTo!(request, (e) => Effect.sync(() => void to.push(e)))
    return { now, to }
  })

describe("AiSdkModel.streamToNow over a real AI SDK client and a local OpenAI-compatible server", () => {
  it.live("hands the sink the same events as streamTo: deltas, a tool call, usage, the finish", () =>
    withServer(
      [text(["Hel", "lo", "!"]), text(["Hel", "lo", "!"]), call("call_1", "fs_read", '{"path":"a"}', ["look"])],
      (local) =>
        Effect.gen(function* () {
          const model = local.model()
          const plain = yield* both(model)
          assert.deepStrictEqual(plain.now, [
            { type: "text-delta", text: "Hel" },
            { type: "text-delta", text: "lo" },
            { type: "text-delta", text: "!" },
            { type: "usage", inputTokens: 11, outputTokens: 7 },
            { type: "finish", reason: "stop" }
          ])
          assert.deepStrictEqual(plain.now, plain.to)
          const tool = yield* both(model)
          assert.deepStrictEqual(tool.now, [
            { type: "text-delta", text: "look" },
            { type: "tool-call", id: "call_1", name: "fs_read", args: { path: "a" } },
            { type: "usage", inputTokens: 20, outputTokens: 9 },
            { type: "finish", reason: "tool-calls" }
          ])
          assert.deepStrictEqual(tool.now, tool.to)
        })
    )
  )

  it.live("an effect the sink returns runs, in order, before the sink sees the next event", () =>
    withServer([text(["a", "b", "c", "d", "e", "f"])], (local) =>
      Effect.gen(function* () {
        const log: Array<string> = []
        let calls = 0
        yield* local.model().streamToNow!(request, (e) => {
          if (e.type !== "text-delta") return undefined
          log.push(`sink ${e.text}`)
          if (++calls % 2 === 1) return undefined
          // A write that completes after an async boundary, as the loop's tape append does.
          return Effect.zipRight(
            Effect.sleep("2 millis"),
            Effect.sync(() => void log.push(`wrote ${e.text}`))
          )
        })
        assert.deepStrictEqual(log, [
          "sink a",
          "sink b",
          "wrote b",
          "sink c",
          "sink d",
          "wrote d",
          "sink e",
          "sink f",
          "wrote f"
        ])
      })
    )
  )

  it.live("a sink's failure fails the call with it, and nothing after it reaches the sink", () =>
    withServer([text(["a", "b", "c"])], (local) =>
      Effect.gen(function* () {
        const seen: Array<string> = []
        const exit = yield* Effect.exit(
          local.model().streamToNow!(request, (e) => {
            seen.push(e.type === "text-delta" ? e.text : e.type)
            return e.type === "text-delta" && e.text === "b" ? Effect.fail("over budget") : undefined
          })
        )
        assert.deepStrictEqual(exit, Exit.fail("over budget"))
        assert.deepStrictEqual(seen, ["a", "b"])
      })
    )
  )

  it.live(
    "a sink that throws is a defect (as in the fiber), not a provider error; nothing after it reaches the sink",
    () =>
      withServer([text(["a", "b", "c"])], (local) =>
        Effect.gen(function* () {
          const seen: Array<string> = []
          const bug = new Error("a bug in the sink")
          const exit = yield* Effect.exit(
            local.model().streamToNow!(request, (e) => {
              seen.push(e.type === "text-delta" ? e.text : e.type)
              if (e.type === "text-delta" && e.text === "b") throw bug
              return undefined
            })
          )
          // A defect carrying the sink's own error (no typed failure: nothing blames the provider).
          assert.isTrue(Exit.isFailure(exit) && Cause.isDie(exit.cause))
          assert.strictEqual(
            Exit.isFailure(exit) ? (Cause.squash(exit.cause) as Error).message : undefined,
            bug.message
          )
          assert.isTrue(Exit.isFailure(exit) && Option.isNone(Cause.failureOption(exit.cause)))
          assert.deepStrictEqual(seen, ["a", "b"])
        })
      )
  )

  it.live("interruption aborts the HTTP request: the server sees the connection closed", () =>
    withServer(["hang"], (local) =>
      Effect.gen(function* () {
        const seen: Array<string> = []
        const fiber = yield* Effect.fork(local.model().streamToNow!(request, (e) => void seen.push(e.type)))
        yield* Effect.sync(() => seen.length).pipe(
          Effect.repeat({ schedule: Schedule.spaced("5 millis"), until: (n) => n > 0 })
        )
        const exit = yield* Fiber.interrupt(fiber)
        assert.isTrue(Exit.isInterrupted(exit))
        yield* Effect.sync(() => local.closedEarly[0]).pipe(
          Effect.repeat({ schedule: Schedule.spaced("5 millis"), until: (closed) => closed === true }),
          Effect.timeout("5 seconds")
        )
        assert.deepStrictEqual(seen, ["text-delta"])
      })
    )
  )
})

describe("AiSdkModel.failover's streamToNow", () => {
  it.live("moves to the next model when one fails before streaming; the sink sees only the answer", () =>
    withServer([text(["from ", "second"])], (local) =>
      Effect.gen(function* () {
        // A port that was just free: the first model's connection is refused.
        const down = yield* withServer([text(["x"])], (gone) => Effect.succeed(gone.model({ name: "down" })))
        const both = AiSdkModel.failover([down, local.model()])
        assert.isDefined(both.streamToNow)
        const seen: Array<ModelProvider.ModelEvent> = []
        yield* both.streamToNow!(request, (e) => void seen.push(e))
        assert.deepStrictEqual(
          seen.flatMap((e) => (e.type === "text-delta" ? [e.text] : [])),
          ["from ", "second"]
        )
        assert.deepStrictEqual(seen.at(-1), { type: "finish", reason: "stop" })
      })
    )
  )
})

describe("AiSdkModel.streamToNow after an interruption", () => {
  it.live("the sink is never called once the call was interrupted, even for a part already read", () =>
    Effect.gen(function* () {
      // A provider stream the test feeds by hand and that ignores the abort signal: a part
      // arriving after the interruption resolves the adapter's pending read.
      let feed: ReadableStreamDefaultController<unknown> | undefined
      const model = AiSdkModel.make(
        new MockLanguageModelV4({
          doStream: async () => ({
            stream: new ReadableStream({
              start: (c) => {
                feed = c
              }
            })
          })
        })
      )
      const seen: Array<string> = []
      const fiber = yield* Effect.fork(
        model.streamToNow!(request, (e) => void seen.push(e.type === "text-delta" ? e.text : e.type))
      )
      yield* Effect.sync(() => feed).pipe(
        Effect.repeat({ schedule: Schedule.spaced("2 millis"), until: (f) => f !== undefined })
      )
      feed!.enqueue({ type: "text-start", id: "t" })
      feed!.enqueue({ type: "text-delta", id: "t", delta: "one" })
      yield* Effect.sync(() => seen.length).pipe(
        Effect.repeat({ schedule: Schedule.spaced("2 millis"), until: (n) => n > 0 })
      )
      const exit = yield* Fiber.interrupt(fiber)
      assert.isTrue(Exit.isInterrupted(exit))
      feed!.enqueue({ type: "text-delta", id: "t", delta: "two" })
      feed!.enqueue({ type: "text-end", id: "t" })
      feed!.close()
      yield* Effect.sleep("20 millis")
      assert.deepStrictEqual(seen, ["one"])
    })
  )
})

const KEY = "sk-proj-jN4HFNn8Qw2Er5Ty7Ui9Op1As3Df6Gh"

/** A run's tape without what differs between two runs (ids, times, sequence numbers). */
const shape = (events: ReadonlyArray<TapeEvent.TapeEvent>) =>
  events.map((e) => {
    const { sessionId: _s, runId: _r, at: _a, tapeSeq: _t, ...rest } = e as TapeEvent.TapeEvent & { runId?: unknown }
    return JSON.stringify(rest, (k, v) =>
      k.endsWith("Id") || k === "id" || k === "createdAt" || k === "durationMs" ? "·" : v
    )
  })

const runWith = (model: ModelProvider.Service, coalesceChars: number) =>
  Effect.gen(function* () {
    const gateway = yield* Gateway.Gateway
    const { events } = yield* gateway.startRun(Caller.user("u"), { text: "go" })
    return yield* collect(events)
  }).pipe(
    Effect.provide(
      gatewayLayer({ model, tools: [recordingTool("echo", "low").tool], coalesceChars }) as Layer.Layer<Gateway.Gateway>
    )
  )

describe("the agent loop over AiSdkModel", () => {
  // A key split across three deltas and a tool call, then an answer.
  const script = () => [
    call("call_1", "echo", '{"x":1}', [
      "Here ",
      "is ",
      "the ",
      "key: ",
      KEY.slice(0, 9),
      KEY.slice(9, 20),
      KEY.slice(20)
    ]),
    text(["All ", "done ", "now."])
  ]
  for (const coalesceChars of [1, 16]) {
    it.live(`the tape is the same through streamToNow and streamTo (coalesceChars ${coalesceChars})`, () =>
      withServer([...script(), ...script()], (local) =>
        Effect.gen(function* () {
          const full = local.model()
          assert.isDefined(full.streamToNow)
          const now = yield* runWith(full, coalesceChars)
          const to = yield* runWith({ name: full.name, stream: full.stream, streamTo: full.streamTo! }, coalesceChars)
          assert.deepStrictEqual(shape(now), shape(to))
          const last = now.at(-1)
          assert.isTrue(last?._tag === "RunStateChanged" && last.to === "Done")
          for (const e of now.filter((e) => e._tag === "AssistantDelta"))
            assert.notInclude(JSON.stringify(e), KEY.slice(9, 20))
          const proposedAt = now.findIndex((e) => e._tag === "ToolProposed")
          const turnOne = now.filter((e) => e._tag === "AssistantDelta" && e.turn === 1)
          assert.isAbove(turnOne.length, 0)
          assert.isAbove(proposedAt, now.indexOf(turnOne.at(-1)!))
        })
      )
    )
  }
})
