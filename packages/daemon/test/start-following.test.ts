/**
 * The stream-start paths besides the fast route open the run's follower before its start commit
 * (`Gateway.startRunFollowing` in the request's scope): the HttpApi app's `POST /v1/runs?stream=true`
 * and the OpenAI chat route (streaming and not), and gRPC RunStream's `start`. A turn on an existing session reads nothing back
 * from the tape; the events are the run's, gap-free, equal to what the file holds; a refused start
 * leaves no subscriber attached, and neither does a client that goes away mid-answer. Real parts: a
 * SQLite journal file (its `readTape` counted by a wrapper), the HttpApi app on a Node server on
 * 127.0.0.1, `fetch` and OpenAI's own client; gRPC RunStream's start (its whole-session follower) over
 * connect-es's gRPC client.
 */
import { mkdtempSync } from "node:fs"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Caller, Gateway, Journal, Metrics, ScriptedModel, type TapeEvent } from "@palyra/core"
import { CedarPolicy } from "@palyra/core/cedar"
import { gatewayLayer } from "@palyra/core/testing"
import { SqliteJournal } from "@palyra/journal"
import { GrpcTransport, Proto } from "@palyra/transport-grpc"
import { HttpTransport } from "@palyra/transport-http"
import { Effect, Exit, Layer, ManagedRuntime, Metric, Scope } from "effect"
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"

const dir = mkdtempSync(join(tmpdir(), "palyra-start-following-"))
const TOKENS = [
  { token: "alice-token", principal: "alice" },
  { token: "bob-token", principal: "bob" }
]
const ALICE = { authorization: "Bearer alice-token" }

const model = ScriptedModel.make((request) => {
  const last = request.messages.at(-1)
  return last?.role === "user" && last.text === "slow"
    ? { text: ["one ", "two"], delayPerDelta: "2 seconds" }
    : { text: ["ans", "wer ", "here"] }
})
const reads = { count: 0 }
const files: { journal?: Journal.Service } = {}
const counted = Layer.scoped(
  Journal.Journal,
  Effect.map(SqliteJournal.make({ filename: join(dir, "start.db") }), (journal) => {
    files.journal = journal
    return {
      ...journal,
      readTape: (sessionId, options) => {
        reads.count++
        return journal.readTape(sessionId, options)
      }
    } satisfies Journal.Service
  })
)
const runtime = ManagedRuntime.make(
  gatewayLayer({ model, tools: [], policy: CedarPolicy.layer(), journal: counted }) as Layer.Layer<
    Gateway.Gateway | Journal.Journal
  >
)
let scope: Scope.CloseableScope
let server: Server
let url = ""
let grpcUrl = ""

beforeAll(async () => {
  scope = await runtime.runPromise(Scope.make())
  const handler = await runtime.runPromise(
    Effect.flatMap(
      HttpTransport.httpApp({ tokens: TOKENS, maxBodyBytes: 64 * 1024, heartbeatSeconds: 15 }),
      NodeHttpServer.makeHandler
    ).pipe(Scope.extend(scope))
  )
  server = createServer(handler)
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()))
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  grpcUrl = (
    await runtime.runPromise(
      GrpcTransport.serve({ port: 0, tokens: TOKENS, maxMessageBytes: 64 * 1024 }).pipe(Scope.extend(scope))
    )
  ).url
})
afterAll(async () => {
  server.closeAllConnections()
  await new Promise((r) => server.close(r))
  await runtime.runPromise(Scope.close(scope, Exit.void))
  await runtime.dispose()
})

const subscribers = () => Effect.runSync(Metric.value(Metrics.tapeSubscribers)).value
/** Polls (with a real delay) until the gauge is back at `baseline`; the last value otherwise. */
const settled = async (baseline: number) => {
  for (let i = 0; i < 100 && subscribers() !== baseline; i++) await new Promise((r) => setTimeout(r, 20))
  return subscribers()
}
/** What the file holds for the run (read outside the counted wrapper). */
const stored = (sessionId: string, runId: string) =>
  Effect.runPromise(files.journal!.readTape(sessionId as TapeEvent.TapeEvent["sessionId"], { afterSeq: 0 })).then(
    (events) => events.filter((e) => e.runId === runId)
  )

/** One streamed turn through the app route: the SSE events (seq, name, run) in order. */
const appTurn = async (body: object, headers: Record<string, string> = ALICE) => {
  const response = await fetch(`${url}/v1/runs?stream=true`, {
    method: "POST",
    headers: { ...headers, "content-type": "application/json" },
    body: JSON.stringify(body)
  })
  const text = await response.text()
  const events = [...text.matchAll(/^data: (.+)$/gm)].map((m) => JSON.parse(m[1]!) as TapeEvent.TapeEvent)
  const ids = [...text.matchAll(/^id: (\d+)$/gm)].map((m) => Number(m[1]))
  return { status: response.status, events, ids }
}

describe("stream starts with the follower attached before the start commit", () => {
  it("the app route: a turn on an existing session reads 0 times; its events are the run's, gap-free, as stored", async () => {
    const first = await appTurn({ text: "one", sessionKey: "app" })
    expect(first.status).toBe(200)
    const baseline = await settled(subscribers())
    for (const text of ["two", "three"]) {
      const before = reads.count
      const turn = await appTurn({ text, sessionKey: "app" })
      expect(reads.count - before).toBe(0)
      expect(turn.status).toBe(200)
      const run = turn.events[0]!
      expect(run._tag).toBe("RunAccepted")
      // Gap-free from the run's first event to its end, the ids the events' own seqs.
      expect(turn.ids).toEqual(turn.events.map((e) => e.tapeSeq))
      expect(turn.events.map((e) => e.tapeSeq)).toEqual(turn.events.map((_, i) => run.tapeSeq + i))
      expect(turn.events.at(-1)).toMatchObject({ _tag: "RunStateChanged", to: "Done" })
      expect(turn.events).toEqual(await stored(run.sessionId, run.runId!))
    }
    expect(await settled(baseline)).toBe(baseline)
  })

  it("the app route: another principal's start into the session answers 404 and leaves no subscriber", async () => {
    const mine = await appTurn({ text: "mine", sessionKey: "private" })
    const sessionId = mine.events[0]!.sessionId
    const baseline = await settled(subscribers())
    const refused = await fetch(`${url}/v1/runs?stream=true`, {
      method: "POST",
      headers: { authorization: "Bearer bob-token", "content-type": "application/json" },
      body: JSON.stringify({ text: "let me in", sessionId })
    })
    expect(refused.status).toBe(404)
    expect(subscribers()).toBe(baseline)
    // Nothing was admitted into alice's session.
    expect((await stored(sessionId, mine.events[0]!.runId!)).length).toBe(mine.events.length)
    const all = await Effect.runPromise(
      files.journal!.readTape(sessionId as TapeEvent.TapeEvent["sessionId"], { afterSeq: 0 })
    )
    expect(all.every((e) => e.runId === mine.events[0]!.runId || e.runId === null)).toBe(true)
  })

  it("the app route: a client gone mid-answer leaves no subscriber", async () => {
    await appTurn({ text: "warm", sessionKey: "gone" })
    const baseline = await settled(subscribers())
    const abort = new AbortController()
    const response = await fetch(`${url}/v1/runs?stream=true`, {
      method: "POST",
      headers: { ...ALICE, "content-type": "application/json" },
      body: JSON.stringify({ text: "slow", sessionKey: "gone" }),
      signal: abort.signal
    })
    const reader = response.body!.getReader()
    const seen = new TextDecoder().decode((await reader.read()).value)
    expect(seen).toContain(":")
    expect(subscribers()).toBe(baseline + 1)
    abort.abort()
    expect(await settled(baseline)).toBe(baseline)
  })

  it("chat completions (streaming and not): a turn on an existing session reads 0 times; a client gone mid-answer leaves no subscriber", async () => {
    const client = new OpenAI({ apiKey: "alice-token", baseURL: `${url}/v1`, maxRetries: 0, timeout: 30_000 })
    const first = await client.chat.completions.create({
      model: "any",
      user: "chat",
      messages: [{ role: "user", content: "one" }]
    })
    expect(first.choices[0]?.message.content).toBe("answer here")
    const baseline = await settled(subscribers())

    let before = reads.count
    const plain = await client.chat.completions.create({
      model: "any",
      user: "chat",
      messages: [{ role: "user", content: "two" }]
    })
    expect(reads.count - before).toBe(0)
    expect(plain.choices[0]?.message.content).toBe("answer here")
    expect(plain.usage?.total_tokens).toBeTypeOf("number")

    before = reads.count
    const stream = await client.chat.completions.create({
      model: "any",
      user: "chat",
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: "user", content: "three" }]
    })
    const pieces: Array<string> = []
    let usage: number | undefined
    for await (const chunk of stream) {
      const content = chunk.choices[0]?.delta.content
      if (content) pieces.push(content)
      if (chunk.usage) usage = chunk.usage.total_tokens
    }
    expect(reads.count - before).toBe(0)
    expect(pieces.join("")).toBe("answer here")
    expect(usage).toBeTypeOf("number")
    expect(await settled(baseline)).toBe(baseline)

    // The session's tape holds the three turns, in order (the chat session is alice's key "chat").
    const alice = Caller.user("alice")
    const sessions = await runtime.runPromise(Effect.flatMap(Gateway.Gateway, (g) => g.listSessions(alice, {})))
    const chat = sessions.find((s) => s.key === "chat")!
    const tape = await Effect.runPromise(files.journal!.readTape(chat.id, { afterSeq: 0 }))
    expect(tape.map((e) => e.tapeSeq)).toEqual(tape.map((_, i) => i + 1))
    expect(tape.filter((e) => e._tag === "UserMessage").map((e) => e.text)).toEqual(["one", "two", "three"])

    // A client gone mid-answer (streaming): nothing left attached.
    const abort = new AbortController()
    const slow = await client.chat.completions.create(
      { model: "any", user: "chat", stream: true, messages: [{ role: "user", content: "slow" }] },
      { signal: abort.signal }
    )
    const iterator = slow[Symbol.asyncIterator]()
    expect((await iterator.next()).value?.choices[0]?.delta.role).toBe("assistant")
    expect(subscribers()).toBe(baseline + 1)
    abort.abort()
    await iterator.next().catch(() => undefined)
    expect(await settled(baseline)).toBe(baseline)
  })

  it("gRPC RunStream's start: a turn on an existing session (and a message after it) reads 0 times; events gap-free, as stored", async () => {
    const g = GrpcTransport.makeClient({ baseUrl: grpcUrl, token: "alice-token" }).gateway
    // A start, then (once its run has ended: a message queued behind a running run is another path)
    // a message on the same stream.
    const run = async (text: string, then?: string) => {
      const out: Array<Proto.TapeEvent> = []
      let sessionId = ""
      let firstEnded: () => void = () => {}
      const ended = new Promise<void>((r) => (firstEnded = r))
      async function* requests() {
        yield { action: { case: "start", value: { target: { sessionKey: "grpc" }, text } } } as never
        if (then === undefined) return
        await ended
        yield { action: { case: "message", value: then } } as never
      }
      for await (const r of g.runStream(requests())) {
        if (r.payload.case === "sessionId") sessionId = r.payload.value
        if (r.payload.case !== "event") continue
        out.push(r.payload.value)
        const kind = r.payload.value.kind
        if (kind.case === "runStateChanged" && kind.value.to === Proto.RunState.DONE) firstEnded()
      }
      return { sessionId, events: out }
    }
    await run("one")
    const baseline = await settled(subscribers())
    const before = reads.count
    const turn = await run("two", "three")
    expect(reads.count - before).toBe(0)
    const seqs = turn.events.map((e) => Number(e.tapeSeq))
    expect(seqs).toEqual(seqs.map((_, i) => seqs[0]! + i))
    const stored = await Effect.runPromise(
      files.journal!.readTape(turn.sessionId as TapeEvent.TapeEvent["sessionId"], { afterSeq: seqs[0]! - 1 })
    )
    expect(seqs).toEqual(stored.map((e) => e.tapeSeq))
    // Both runs to their ends, through the one stream.
    const runs = stored.filter((e) => e._tag === "RunStateChanged" && e.to === "Done").map((e) => e.runId)
    expect(new Set(runs).size).toBe(2)
    expect(stored.filter((e) => e._tag === "UserMessage").map((e) => e.text)).toEqual(["two", "three"])
    expect(await settled(baseline)).toBe(baseline)
  })

  it("gRPC RunStream's start: another principal's start answers NotFound and leaves no subscriber; a cancelled stream neither", async () => {
    const alice = GrpcTransport.makeClient({ baseUrl: grpcUrl, token: "alice-token" }).gateway
    const bob = GrpcTransport.makeClient({ baseUrl: grpcUrl, token: "bob-token" }).gateway
    const first: Array<string> = []
    for await (const r of alice.runStream(
      iterate([{ action: { case: "start", value: { target: { sessionKey: "grpc-private" }, text: "mine" } } }])
    ))
      if (r.payload.case === "sessionId") first.push(r.payload.value)
    const baseline = await settled(subscribers())
    const refused = (async () => {
      for await (const _ of bob.runStream(
        iterate([{ action: { case: "start", value: { target: { sessionId: first[0]! }, text: "let me in" } } }])
      )) {
      }
    })()
    await expect(refused).rejects.toMatchObject({ code: 5 })
    expect(subscribers()).toBe(baseline)

    // A client that goes away mid-answer.
    const abort = new AbortController()
    const stream = alice.runStream(
      iterate(
        [{ action: { case: "start", value: { target: { sessionKey: "grpc-private" }, text: "slow" } } }],
        abort.signal
      ),
      { signal: abort.signal }
    )
    const iterator = stream[Symbol.asyncIterator]()
    expect((await iterator.next()).value?.payload.case).toBe("sessionId")
    expect((await iterator.next()).value?.payload.case).toBe("event")
    expect(subscribers()).toBe(baseline + 1)
    abort.abort()
    await iterator.next().catch(() => undefined)
    expect(await settled(baseline)).toBe(baseline)
  })
})

type GrpcRequest = { readonly action: { readonly case: string; readonly value: unknown } }
/** The requests, then the end of the client's half of the stream (with `until`: once it aborts). */
async function* iterate(requests: Array<GrpcRequest>, until?: AbortSignal) {
  for (const r of requests) yield r as never
  if (until !== undefined) await new Promise((r) => until.addEventListener("abort", r, { once: true }))
}
