/**
 * `POST /v1/runs?stream=true` (the hot route, `internal/fastRuns.ts`) starts its SSE body from the
 * run's start commit: the head and the start commit's events reach the client inside its
 * publication, before `Gateway.startRunFollowing` has returned to the transport; a refused start is
 * answered with its typed error and nothing else; a start whose commit succeeded but whose call then
 * failed ends its body cleanly after the committed events it sent, and the tape holds the rest. A
 * real gateway (in-memory journal, scripted model) whose `startRunFollowing` is held by the test,
 * served on 127.0.0.1, and a `node:http` client reading the frames as they arrive.
 */
import { request } from "node:http"
import { Errors, ScriptedModel } from "@palyra/core"
import { gate } from "@palyra/core/testing"
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import { type Frame, heldRuntime, servedFor, sseFrames } from "./startStreamKit.js"

const model = ScriptedModel.make(() => ({ text: ["Hello ", "from ", "the start."] }))

// The real kernel; its `startRunFollowing` answers only when the test's `held.afterStart` lets it.
const { held, runtime } = heldRuntime(model)
const served = servedFor(runtime, {
  port: 0,
  tokens: [{ token: "alice-token", principal: "alice" }],
  heartbeatSeconds: 15
})
const ALICE = "Bearer alice-token"

/** A streamed start; `onFrame` sees each event frame as it arrives. The status, the frames, the raw body. */
const start = (body: unknown, onFrame: (f: Frame) => void = () => {}) =>
  new Promise<{ status: number; frames: Array<Frame>; text: string }>((resolve, reject) => {
    const req = request(
      `${served.url}/v1/runs?stream=true`,
      { method: "POST", headers: { "content-type": "application/json", authorization: ALICE } },
      (res) => {
        const frames: Array<Frame> = []
        let text = ""
        const feed = sseFrames((frame) => {
          frames.push(frame)
          onFrame(frame)
        })
        res.setEncoding("utf8")
        res.on("data", (chunk: string) => {
          text += chunk
          feed(chunk)
        })
        res.on("end", () => resolve({ status: res.statusCode ?? 0, frames, text }))
        res.on("error", reject)
      }
    )
    req.on("error", reject)
    req.end(JSON.stringify(body))
  })

const get = async (path: string) => (await fetch(`${served.url}${path}`, { headers: { authorization: ALICE } })).json()

describe("the streamed start writes from its start commit", () => {
  it("the head and the start commit's events reach the client before startRunFollowing returns", async () => {
    held.returned = 0
    const g = gate()
    held.afterStart = () => g.wait()
    const order: Array<string> = []
    const { status, frames } = await start({ text: "hi", sessionKey: "early-1" }, () => {
      order.push(held.returned > 0 ? "after" : "before")
      g.release()
    })
    held.afterStart = () => Effect.void
    expect(status).toBe(200)
    expect(order[0]).toBe("before")
    expect(frames.map((f) => f.id)).toEqual(frames.map((_, i) => i + 1))
    expect(frames.at(-1)?.event).toBe("RunStateChanged")
  })

  it("a refused start answers its typed error with nothing else", async () => {
    const seen: Array<Frame> = []
    const empty = await start({ text: "" }, (f) => seen.push(f))
    expect(empty.status).toBe(400)
    expect(JSON.parse(empty.text).code).toBe("invalid_argument")
    const unknown = await start({ text: "hi", sessionId: "ses_00000000000000000000000000" }, (f) => seen.push(f))
    expect([400, 404]).toContain(unknown.status)
    expect(seen).toEqual([])
  })

  it("a start whose commit succeeded but whose call then failed ends cleanly after the committed events it sent", async () => {
    const g = gate()
    held.afterStart = () =>
      Effect.zipRight(g.wait(), Effect.fail(new Errors.Conflict({ message: "test: the start's answer failed" })))
    const { status, frames } = await start({ text: "hi", sessionKey: "early-3" }, () => g.release())
    held.afterStart = () => Effect.void
    expect(status).toBe(200)
    expect(frames.length).toBeGreaterThan(0)
    expect(frames.map((f) => f.id)).toEqual(frames.map((_, i) => i + 1))
    // The run was admitted and goes on: its tape is what was sent, then the rest up to its end.
    const runId = frames.find((f) => f.event === "RunAccepted")?.data.runId
    const sessionId = frames[0]?.data.sessionId
    expect(runId).toBeDefined()
    for (let i = 0; i < 100; i++) {
      const run = (await get(`/v1/runs/${runId}`)) as { state: string }
      if (["Done", "Failed", "Cancelled"].includes(run.state)) break
      await new Promise((r) => setTimeout(r, 20))
    }
    const tape = (await get(`/v1/sessions/${sessionId}/tape`)) as Array<{ tapeSeq: number; _tag: string }>
    expect(tape.map((e) => e.tapeSeq)).toEqual(tape.map((_, i) => i + 1))
    expect(tape.slice(0, frames.length).map((e) => e._tag)).toEqual(frames.map((f) => f.event))
    expect(tape.at(-1)?._tag).toBe("RunStateChanged")
  })
})
