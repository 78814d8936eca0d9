/**
 * The HttpApi routes that start a run and stream it — `POST /v1/runs?stream=true` through the app
 * (here a multipart body, which the hot route hands on) and the OpenAI `POST /v1/chat/completions`
 * with `stream: true` — start their response from the run's start commit: the head and the first
 * frames reach the client inside its publication, before `Gateway.startRunFollowing` has returned;
 * a refused start answers its typed error with nothing else and leaves no follower attached; a start
 * whose commit succeeded but whose call then failed ends cleanly after what it sent (the tape holds
 * the rest, a resume continues gap-free); a client gone mid-start leaves nothing attached. A real
 * gateway (in-memory journal, scripted model) whose `startRunFollowing` is held by the test, served
 * on 127.0.0.1; real clients (`fetch`, OpenAI's official client).
 */
import { Errors, ScriptedModel } from "@palyra/core"
import { eventually, gate, tapeSubscribers } from "@palyra/core/testing"
import { Effect } from "effect"
import OpenAI from "openai"
import { describe, expect, it } from "vitest"
import {
  expectRefused,
  expectWritesBeforeReturn,
  type Frame,
  failAfterCommit,
  heldRuntime,
  servedFor,
  settle,
  sseFrames
} from "./startStreamKit.js"

const model = ScriptedModel.make(() => ({
  text: ["Hello ", "from ", "the start."],
  usage: { inputTokens: 5, outputTokens: 3 }
}))

// The real kernel; its `startRunFollowing` answers only when the test's `held.afterStart` lets it.
const { held, runtime } = heldRuntime(model)
const served = servedFor(runtime, {
  port: 0,
  tokens: [
    { token: "alice-token", principal: "alice" },
    { token: "bob-token", principal: "bob" }
  ],
  heartbeatSeconds: 15
})
const ALICE = { authorization: "Bearer alice-token" }
const BOB = { authorization: "Bearer bob-token" }

/** The live followers attached to tapes (`palyra_tape_subscribers`). */
const subscribers = () => runtime.runPromise(tapeSubscribers)

const get = async (path: string, headers: Record<string, string> = ALICE) =>
  (await fetch(`${served.url}${path}`, { headers })).json()

/** SSE blocks of a fetch body as they arrive: `onFrame` sees each id'd frame; `stop` aborts the request. */
const readFrames = async (
  response: Response,
  onFrame: (f: Frame, stop: () => void) => void,
  abort?: AbortController
) => {
  const frames: Array<Frame> = []
  let text = ""
  const feed = sseFrames((frame) => {
    frames.push(frame)
    onFrame(frame, () => abort?.abort())
  })
  const decoder = new TextDecoder()
  const reader = response.body!.getReader()
  try {
    for (;;) {
      const { done, value } = await reader.read()
      if (done) break
      const chunk = decoder.decode(value, { stream: true })
      text += chunk
      feed(chunk)
    }
  } catch (e) {
    if (abort?.signal.aborted !== true) throw e
  }
  return { frames, text }
}

/** A streamed start through the app (a multipart body: the hot route hands it on). */
const startViaApp = async (
  fields: Record<string, string>,
  onFrame: (f: Frame, stop: () => void) => void = () => {},
  headers: Record<string, string> = ALICE
) => {
  const form = new FormData()
  for (const [k, v] of Object.entries(fields)) form.set(k, v)
  const abort = new AbortController()
  const response = await fetch(`${served.url}/v1/runs?stream=true`, {
    method: "POST",
    headers,
    body: form,
    signal: abort.signal
  })
  if (response.headers.get("content-type") !== "text/event-stream")
    return { status: response.status, frames: [] as Array<Frame>, text: await response.text() }
  return { status: response.status, ...(await readFrames(response, onFrame, abort)) }
}

describe("POST /v1/runs?stream=true through the HttpApi app writes from its start commit", () => {
  it("the head and the start commit's events reach the client before startRunFollowing returns", () =>
    expectWritesBeforeReturn(held, startViaApp, { text: "hi", sessionKey: "app-1" }))

  it("a refused start answers its typed error with nothing else and leaves nothing attached", async () => {
    const before = await subscribers()
    const seen: Array<Frame> = []
    await expectRefused(startViaApp, seen)
    // Another principal's session is answered like one that does not exist.
    const mine = await startViaApp({ text: "hi", sessionKey: "app-2" })
    const sessionId = mine.frames[0]?.data.sessionId
    expect(sessionId).toBeDefined()
    const theirs = await startViaApp({ text: "hi", sessionId: sessionId! }, (f) => seen.push(f), BOB)
    expect(theirs.status).toBe(404)
    expect(JSON.parse(theirs.text).code).toBe("not_found")
    expect(seen).toEqual([])
    expect(await eventually(subscribers, (n) => n === before)).toBe(before)
  })

  it("a start whose commit succeeded but whose call then failed ends cleanly after what it sent; a resume continues gap-free", async () => {
    const { frames, runId, sessionId } = await failAfterCommit(held, startViaApp, { text: "hi", sessionKey: "app-3" })
    expect(await settle(get, runId)).toBe("Done")
    // The client resumes from its last id: the rest, without gap or duplicate, up to the run's end.
    const isEnd = (f: Frame) => f.event === "RunStateChanged" && (f.data as { to?: string }).to === "Done"
    const last = frames.at(-1)!
    const abort = new AbortController()
    const rest = isEnd(last)
      ? { frames: [] as Array<Frame> }
      : await readFrames(
          await fetch(`${served.url}/v1/sessions/${sessionId}/events`, {
            headers: { ...ALICE, "last-event-id": String(last.id) },
            signal: abort.signal
          }),
          (f, stop) => {
            if (isEnd(f)) stop()
          },
          abort
        )
    const all = [...frames, ...rest.frames].map((f) => f.id)
    expect(all).toEqual(all.map((_, i) => i + 1))
    const tape = (await get(`/v1/sessions/${sessionId}/tape`)) as Array<{ tapeSeq: number }>
    expect(all.length).toBe(tape.length)
  })

  it("a client gone mid-start leaves nothing attached; the run goes on", async () => {
    const before = await subscribers()
    const g = gate()
    held.afterStart = () => g.wait()
    let runId: string | undefined
    const { frames } = await startViaApp({ text: "hi", sessionKey: "app-4" }, (f, stop) => {
      runId ??= f.data.runId
      if (f.event === "RunAccepted") stop()
    })
    g.release()
    held.afterStart = () => Effect.void
    expect(frames.length).toBeGreaterThan(0)
    expect(await settle(get, runId!)).toBe("Done")
    expect(await eventually(subscribers, (n) => n === before)).toBe(before)
  })
})

const client = () => new OpenAI({ apiKey: "alice-token", baseURL: `${served.url}/v1`, maxRetries: 0, timeout: 20_000 })

describe("the OpenAI chat stream writes from its start commit", () => {
  it("the first chunk reaches the client before startRunFollowing returns; the chunks, usage and [DONE] as before", async () => {
    held.returned = 0
    const g = gate()
    held.afterStart = () => g.wait()
    const order: Array<string> = []
    const stream = await client().chat.completions.create({
      model: "palyra",
      messages: [{ role: "user", content: "hi" }],
      stream: true,
      stream_options: { include_usage: true },
      user: "chat-1"
    })
    const chunks: Array<OpenAI.Chat.Completions.ChatCompletionChunk> = []
    for await (const chunk of stream) {
      order.push(held.returned > 0 ? "after" : "before")
      g.release()
      chunks.push(chunk)
    }
    held.afterStart = () => Effect.void
    expect(order[0]).toBe("before")
    expect(chunks[0]?.choices[0]?.delta.role).toBe("assistant")
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? "").join("")).toBe("Hello from the start.")
    expect(chunks.at(-2)?.choices[0]?.finish_reason).toBe("stop")
    expect(chunks.at(-1)?.usage).toEqual({ prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 })
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1)
  })

  it("the raw stream keeps its frames: data chunks, then data: [DONE]", async () => {
    const response = await fetch(`${served.url}/v1/chat/completions`, {
      method: "POST",
      headers: { ...ALICE, "content-type": "application/json" },
      body: JSON.stringify({ model: "palyra", messages: [{ role: "user", content: "hi" }], stream: true })
    })
    expect(response.status).toBe(200)
    expect(response.headers.get("content-type")).toBe("text/event-stream")
    const text = await response.text()
    const data = text
      .split("\n\n")
      .filter((b) => b.startsWith("data: "))
      .map((b) => b.slice(6))
    expect(data.at(-1)).toBe("[DONE]")
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d) as { object: string; usage?: unknown })
    expect(chunks.every((c) => c.object === "chat.completion.chunk" && !("usage" in c))).toBe(true)
  })

  it("a refused start answers OpenAI's error with nothing else and leaves nothing attached", async () => {
    const before = await subscribers()
    held.afterStart = () => Effect.void
    const refused = await client()
      .chat.completions.create({
        model: "palyra",
        messages: [{ role: "user", content: "x".repeat(200_000) }],
        stream: true
      })
      .then(
        () => undefined,
        (e: unknown) => e
      )
    expect(refused).toBeInstanceOf(OpenAI.APIError)
    // Over core's message limit (the body is within the transport's): refused by the start itself.
    expect((refused as InstanceType<typeof OpenAI.APIError>).status).toBe(400)
    const bad = await fetch(`${served.url}/v1/chat/completions`, {
      method: "POST",
      headers: { ...ALICE, "content-type": "application/json", "x-palyra-session": "" },
      body: JSON.stringify({ model: "palyra", messages: [{ role: "user", content: "hi" }], stream: true })
    })
    expect(bad.status).toBe(400)
    expect(bad.headers.get("content-type")).toContain("application/json")
    expect(await eventually(subscribers, (n) => n === before)).toBe(before)
  })

  it("a start whose call failed after its commit ends the stream cleanly after the first chunk; the run goes on", async () => {
    const g = gate()
    held.afterStart = () =>
      Effect.zipRight(g.wait(), Effect.fail(new Errors.Conflict({ message: "test: the start's answer failed" })))
    const stream = await client().chat.completions.create({
      model: "palyra",
      messages: [{ role: "user", content: "hi" }],
      stream: true,
      user: "chat-3"
    })
    const chunks: Array<OpenAI.Chat.Completions.ChatCompletionChunk> = []
    for await (const chunk of stream) {
      g.release()
      chunks.push(chunk)
    }
    held.afterStart = () => Effect.void
    expect(chunks.length).toBe(1)
    expect(chunks[0]?.choices[0]?.delta.role).toBe("assistant")
    const runId = chunks[0]!.id.replace(/^chatcmpl-/, "")
    expect(await settle(get, runId)).toBe("Done")
  })

  it("a client gone mid-start leaves nothing attached; the run goes on", async () => {
    const before = await subscribers()
    const g = gate()
    held.afterStart = () => g.wait()
    const abort = new AbortController()
    const stream = await client().chat.completions.create(
      { model: "palyra", messages: [{ role: "user", content: "hi" }], stream: true, user: "chat-4" },
      { signal: abort.signal }
    )
    let runId = ""
    await (async () => {
      for await (const chunk of stream) {
        runId = chunk.id.replace(/^chatcmpl-/, "")
        abort.abort()
      }
    })().catch(() => undefined)
    g.release()
    held.afterStart = () => Effect.void
    expect(runId).not.toBe("")
    expect(await settle(get, runId)).toBe("Done")
    expect(await eventually(subscribers, (n) => n === before)).toBe(before)
  })
})
