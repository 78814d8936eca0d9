/**
 * The AI SDK adapter's `more` (one event of look-ahead in `drain`), over a real AI SDK client and a
 * local server speaking the OpenAI chat-completions SSE wire: the deltas of one socket write reach
 * the sink with `more: true` and the loop appends them together; a paced stream (the server writes
 * the next chunk only once the sink has the previous delta — a delta held for a later network read
 * would hang it) gets `more: false` on every delta; the tape is the one a provider without `more`
 * makes (deltas, a key split across deltas redacted, tool calls); an interruption mid-burst aborts
 * the request and no event reaches the sink after it.
 */
import type { ServerResponse } from "node:http"
import { assert, describe, it } from "@effect/vitest"
import { MockLanguageModelV4 } from "ai/test"
import { Effect, Exit, Fiber, type Layer, Schedule } from "effect"
import { AiSdkModel } from "../src/ai-sdk.js"
import { Caller, Errors, Gateway, type ModelProvider, type TapeEvent } from "../src/index.js"
import { collect, gatewayLayer, tags } from "../src/testing.js"
import { type ChatServer, chunk, usage, withChatServer } from "./chatServer.js"
import { recordingAppends, recordingTool } from "./helpers.js"

/** A reply as the server's writes: the first delta with the role chunk, one write per delta, the tail in one. */
interface Reply {
  readonly deltas: ReadonlyArray<string>
  readonly tail: string
}
const text = (deltas: ReadonlyArray<string>): Reply => ({
  deltas: deltas.map((d, i) => (i === 0 ? chunk({ role: "assistant", content: "" }) : "") + chunk({ content: d })),
  tail: `${chunk({}, "stop") + usage(11, 7)}data: [DONE]\n\n`
})
const call = (id: string, name: string, args: string, before: ReadonlyArray<string>): Reply => ({
  deltas: before.map((d, i) => (i === 0 ? chunk({ role: "assistant", content: null }) : "") + chunk({ content: d })),
  tail:
    chunk({ tool_calls: [{ index: 0, id, type: "function", function: { name, arguments: args.slice(0, 3) } }] }) +
    chunk({ tool_calls: [{ index: 0, function: { arguments: args.slice(3) } }] }) +
    chunk({}, "tool_calls") +
    usage(20, 9) +
    "data: [DONE]\n\n"
})

/**
 * How the server writes a reply: `burst` — all of it in one write; `paced` — the first delta, then
 * each next write once the test calls `advance` (the sink has the previous delta); `hang` — the
 * deltas in one write and never the end; `reset` — the deltas in one write, then the connection is destroyed.
 */
type Mode = "burst" | "paced" | "hang" | "reset"

interface Local extends ChatServer {
  /** Paced replies: write the next chunk (called when the sink sees a delta). */
  readonly advance: () => void
}

const withServer = <A, E>(mode: Mode, replies: Array<Reply>, f: (local: Local) => Effect.Effect<A, E>) => {
  let waiting: Array<string> = []
  let current: ServerResponse | undefined
  const advance = () => {
    const next = waiting.shift()
    if (current === undefined || next === undefined) return
    if (waiting.length === 0) current.end(next)
    else current.write(next)
  }
  return withChatServer(
    (res) => {
      const reply = replies.length > 1 ? replies.shift()! : replies[0]!
      if (mode === "burst") return void res.end(reply.deltas.join("") + reply.tail)
      if (mode === "hang") return void res.write(reply.deltas.join(""))
      if (mode === "reset") return void res.write(reply.deltas.join(""), () => res.destroy())
      current = res
      waiting = [...reply.deltas, reply.tail]
      advance()
    },
    (server) => f({ ...server, advance })
  )
}

const request: ModelProvider.ModelRequest = { messages: [{ role: "user", text: "go" }], tools: [] }

/** What the sink was called with: `text:more` for deltas, the event's type otherwise. */
const label = (e: ModelProvider.ModelEvent, more: boolean | undefined) =>
  `${e.type === "text-delta" ? e.text : e.type}:${more === true}`

/** The model with its sink observed: every call recorded, and `advance` after each delta reaches it. */
const observed = (model: ModelProvider.Service, seen: Array<string>, advance: () => void): ModelProvider.Service => ({
  name: model.name,
  stream: model.stream,
  streamToNow: (req, sink) =>
    model.streamToNow!(req, (e, more) => {
      seen.push(label(e, more))
      const out = sink(e, more)
      if (e.type === "text-delta") advance()
      return out
    })
})

describe("AiSdkModel's `more` at the sink", () => {
  it.live("a burst written in one socket write reaches the sink as `more: true … false`", () =>
    withServer("burst", [text(["Hel", "lo", " wor", "ld"])], (local) =>
      Effect.gen(function* () {
        const seen: Array<string> = []
        yield* local.model().streamToNow!(request, (e, more) => void seen.push(label(e, more)))
        assert.deepStrictEqual(seen, ["Hel:true", "lo:true", " wor:true", "ld:true", "usage:true", "finish:false"])
      })
    )
  )

  it.live("failover passes `more` on to the sink (its counting sink used to drop it)", () =>
    withServer("burst", [text(["from ", "second"])], (local) =>
      Effect.gen(function* () {
        // A port that was just free: the first model's connection is refused.
        const down = yield* withServer("burst", [text(["x"])], (gone) => Effect.succeed(gone.model()))
        const seen: Array<string> = []
        yield* AiSdkModel.failover([down, local.model()]).streamToNow!(
          request,
          (e, more) => void seen.push(label(e, more))
        )
        assert.deepStrictEqual(seen, ["from :true", "second:true", "usage:true", "finish:false"])
      })
    )
  )

  it.live("a paced stream (each chunk written after the sink has the last) gets `more: false` on every delta", () =>
    withServer("paced", [text(["Hel", "lo", " wor", "ld"])], (local) =>
      Effect.gen(function* () {
        const seen: Array<string> = []
        // The server writes the next delta only once this one is at the sink: a delta held until a
        // later read would never come, and the call would hang (the timeout fails the test).
        yield* local.model().streamToNow!(request, (e, more) => {
          seen.push(label(e, more))
          if (e.type === "text-delta") local.advance()
          return undefined
        }).pipe(Effect.timeout("10 seconds"))
        assert.deepStrictEqual(seen, ["Hel:false", "lo:false", " wor:false", "ld:false", "usage:true", "finish:false"])
      })
    )
  )

  it.live(
    "an error part read in a burst: the event before it reaches the sink without `more`, then the call fails",
    () =>
      Effect.gen(function* () {
        const model = AiSdkModel.make(
          new MockLanguageModelV4({
            doStream: async () => ({
              stream: new ReadableStream({
                start: (c) => {
                  c.enqueue({ type: "text-start", id: "t" })
                  c.enqueue({ type: "text-delta", id: "t", delta: "one" })
                  c.enqueue({ type: "text-delta", id: "t", delta: "two" })
                  c.enqueue({ type: "error", error: new Error("upstream reset") })
                  c.close()
                }
              })
            })
          }),
          { retry: { times: 0 } }
        )
        const seen: Array<string> = []
        const exit = yield* Effect.exit(model.streamToNow!(request, (e, more) => void seen.push(label(e, more))))
        assert.isTrue(Exit.isFailure(exit))
        assert.isTrue(
          Exit.isFailure(exit) && exit.cause._tag === "Fail" && exit.cause.error instanceof Errors.ProviderError,
          "a typed provider error"
        )
        // "two" was read with the error part at hand: it reaches the sink without `more` (nothing left
        // held there) before the call fails.
        assert.deepStrictEqual(seen, ["one:true", "two:false"])
      })
  )

  it.live("a connection lost after a burst: the last delta reaches the sink without `more`, then the call fails", () =>
    withServer("reset", [text(["a", "b", "c", "d"])], (local) =>
      Effect.gen(function* () {
        const seen: Array<string> = []
        const exit = yield* Effect.exit(
          local.model().streamToNow!(request, (e, more) => void seen.push(label(e, more)))
        )
        assert.isTrue(
          Exit.isFailure(exit) && exit.cause._tag === "Fail" && exit.cause.error instanceof Errors.ProviderError,
          "a typed provider error"
        )
        assert.deepStrictEqual(seen, ["a:true", "b:true", "c:true", "d:false"])
      })
    )
  )

  it.live("interruption mid-burst aborts the request; the sink is not called after it", () =>
    withServer("hang", [text(["a", "b", "c", "d"])], (local) =>
      Effect.gen(function* () {
        const seen: Array<string> = []
        // The sink's write for "b" never completes (a stalled append): the call is interrupted there.
        const fiber = yield* Effect.fork(
          local.model().streamToNow!(request, (e, more) => {
            seen.push(label(e, more))
            return e.type === "text-delta" && e.text === "b" ? Effect.never : undefined
          })
        )
        yield* Effect.sync(() => seen.length).pipe(
          Effect.repeat({ schedule: Schedule.spaced("5 millis"), until: (n) => n >= 2 })
        )
        const exit = yield* Fiber.interrupt(fiber)
        assert.isTrue(Exit.isInterrupted(exit))
        yield* Effect.sync(() => local.closedEarly[0]).pipe(
          Effect.repeat({ schedule: Schedule.spaced("5 millis"), until: (closed) => closed === true }),
          Effect.timeout("5 seconds")
        )
        yield* Effect.sleep("20 millis")
        assert.deepStrictEqual(seen, ["a:true", "b:true"])
      })
    )
  )
})

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
    const { groups, layer } = recordingAppends()
    const events = yield* Effect.gen(function* () {
      const gateway = yield* Gateway.Gateway
      const { events } = yield* gateway.startRun(Caller.user("u"), { text: "go" })
      return yield* collect(events)
    }).pipe(
      Effect.provide(
        gatewayLayer({
          model,
          journal: layer,
          tools: [recordingTool("echo", "low").tool],
          coalesceChars
        }) as Layer.Layer<Gateway.Gateway>
      ),
      Effect.scoped
    )
    return { events, groups }
  })

const KEY = "sk-proj-jN4HFNn8Qw2Er5Ty7Ui9Op1As3Df6Gh"
// A key split across three deltas and a tool call, then an answer.
const script = (): Array<Reply> => [
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

/** The appends holding the run's deltas, as the count of deltas in each. */
const deltaAppends = (groups: ReadonlyArray<ReadonlyArray<TapeEvent.TapeEvent>>) =>
  groups.flatMap((g) => {
    const n = g.filter((e) => e._tag === "AssistantDelta").length
    return n === 0 ? [] : [n]
  })

describe("the agent loop over AiSdkModel's `more`", () => {
  for (const coalesceChars of [1, 16]) {
    it.live(
      `a burst per reply is one append of its deltas; the tape is the one without \`more\` (coalesceChars ${coalesceChars})`,
      () =>
        withServer("burst", [...script(), ...script()], (local) =>
          Effect.gen(function* () {
            const full = local.model()
            const seen: Array<string> = []
            const joined = yield* runWith(
              observed(full, seen, () => {}),
              coalesceChars
            )
            // Without `streamToNow` the loop's sink is called without `more`: one append per delta, as before.
            const alone = yield* runWith(
              { name: full.name, stream: full.stream, streamTo: full.streamTo! },
              coalesceChars
            )
            assert.deepStrictEqual(shape(joined.events), shape(alone.events))
            assert.isTrue(seen.includes("Here :true"))
            // Each reply's deltas (those the redaction and coalescing let out) are one append.
            // Each reply's deltas are appended with its model request, but for what the loop itself keeps
            // to the end (the redactor's look-behind, a coalescing buffer), written with the answer.
            const withDeltas = joined.groups.filter((g) => g.some((e) => e._tag === "AssistantDelta"))
            for (const g of withDeltas)
              assert.isTrue(
                g[0]?._tag === "ModelRequest" || g.some((e) => e._tag === "AssistantMessage"),
                tags(g).join()
              )
            assert.isBelow(deltaAppends(joined.groups).length, deltaAppends(alone.groups).length)
            assert.isAtMost(deltaAppends(joined.groups).length, 4)
            const last = joined.events.at(-1)
            assert.isTrue(last?._tag === "RunStateChanged" && last.to === "Done")
            for (const e of joined.events.filter((e) => e._tag === "AssistantDelta"))
              assert.notInclude(JSON.stringify(e), KEY.slice(9, 20))
            assert.isTrue(joined.events.some((e) => e._tag === "ToolProposed"))
          })
        )
    )
  }

  it.live("a paced stream: every delta is its own append, written before the next chunk is sent", () =>
    Effect.gen(function* () {
      const seen: Array<string> = []
      const paced = yield* withServer("paced", script(), (local) =>
        runWith(observed(local.model(), seen, local.advance), 1).pipe(Effect.timeout("20 seconds"))
      )
      const burst = yield* withServer("burst", script(), (local) => runWith(local.model(), 1))
      assert.deepStrictEqual(shape(paced.events), shape(burst.events))
      assert.isTrue(seen.filter((s) => !/^(usage|finish|tool-call):/.test(s)).every((s) => s.endsWith(":false")))
      assert.deepStrictEqual(tags(paced.groups[1] ?? []).slice(0, 2), ["ModelRequest", "AssistantDelta"])
      // One append per delta the redaction lets out (the key's pieces are held back and joined).
      const perAppend = deltaAppends(paced.groups)
      assert.isTrue(perAppend.every((n) => n === 1))
      assert.strictEqual(perAppend.length, paced.events.filter((e) => e._tag === "AssistantDelta").length)
    })
  )
})
