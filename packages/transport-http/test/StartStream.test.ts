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
import { ScriptedModel } from "@palyra/core"
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
const start = (body: Record<string, string>, onFrame: (f: Frame) => void = () => {}) =>
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
  it("the head and the start commit's events reach the client before startRunFollowing returns", () =>
    expectWritesBeforeReturn(held, start, { text: "hi", sessionKey: "early-1" }))

  it("a refused start answers its typed error with nothing else", async () => {
    const seen: Array<Frame> = []
    await expectRefused(start, seen)
    expect(seen).toEqual([])
  })

  it("a start whose commit succeeded but whose call then failed ends cleanly after the committed events it sent", async () => {
    const { frames, runId, sessionId } = await failAfterCommit(held, start, { text: "hi", sessionKey: "early-3" })
    // The run was admitted and goes on: its tape is what was sent, then the rest up to its end.
    await settle(get, runId)
    const tape = (await get(`/v1/sessions/${sessionId}/tape`)) as Array<{ tapeSeq: number; _tag: string }>
    expect(tape.map((e) => e.tapeSeq)).toEqual(tape.map((_, i) => i + 1))
    expect(tape.slice(0, frames.length).map((e) => e._tag)).toEqual(frames.map((f) => f.event))
    expect(tape.at(-1)?._tag).toBe("RunStateChanged")
  })
})
