/**
 * What the streamed-start tests share: a real kernel (in-memory journal, the given scripted model)
 * whose `startRunFollowing` the test holds (`@palyra/core/testing`'s `holdStartRunFollowing`), served
 * on 127.0.0.1 for the file's tests, and an SSE reader that sees each id'd frame as it arrives.
 */
import { Errors, type Gateway, type Journal, type ScriptedModel } from "@palyra/core"
import { eventually, gate, gatewayLayer, type HeldStart, holdStartRunFollowing } from "@palyra/core/testing"
import { Effect, Exit, Layer, ManagedRuntime, Scope } from "effect"
import { afterAll, beforeAll, expect } from "vitest"
import { HttpTransport } from "../src/index.js"

/** An SSE event frame with an id. */
export interface Frame {
  readonly id: number
  readonly event: string
  readonly data: { readonly runId?: string; readonly sessionId?: string }
}

/** The kernel over `model` with its `startRunFollowing` held, and a runtime over both. */
export const heldRuntime = (model: ScriptedModel.ScriptedModel) => {
  const held: HeldStart = holdStartRunFollowing()
  const runtime = ManagedRuntime.make(
    Layer.provideMerge(held.layer, gatewayLayer({ model }) as Layer.Layer<Gateway.Gateway | Journal.Journal>)
  )
  return { held, runtime }
}

/** Serves `HttpTransport.serve(options)` in `runtime` from `beforeAll` to `afterAll`; `url` once served. */
export const servedFor = (
  runtime: ManagedRuntime.ManagedRuntime<Gateway.Gateway | Journal.Journal, never>,
  options: HttpTransport.ServeOptions
) => {
  const served = { url: "" }
  let scope: Scope.CloseableScope
  beforeAll(async () => {
    scope = await runtime.runPromise(Scope.make())
    served.url = (await runtime.runPromise(HttpTransport.serve(options).pipe(Scope.extend(scope)))).url
  })
  afterAll(async () => {
    await runtime.runPromise(Scope.close(scope, Exit.void))
    await runtime.dispose()
  })
  return served
}

/** Splits SSE text fed to it in chunks into blocks; each block with an `id:` is a `Frame` for `onFrame`. */
export const sseFrames = (onFrame: (f: Frame) => void) => {
  let rest = ""
  return (chunk: string) => {
    rest += chunk
    for (let at = rest.indexOf("\n\n"); at >= 0; at = rest.indexOf("\n\n")) {
      const block = rest.slice(0, at)
      rest = rest.slice(at + 2)
      const field = (name: string) =>
        block
          .split("\n")
          .find((l) => l.startsWith(`${name}:`))
          ?.slice(name.length + 1)
          .trim()
      const id = field("id")
      if (id === undefined) continue
      onFrame({ id: Number(id), event: field("event") ?? "", data: JSON.parse(field("data") ?? "{}") })
    }
  }
}

/** A streamed start as a test drives it (by route): `onFrame` sees each frame as it arrives. */
export type Start = (
  fields: Record<string, string>,
  onFrame: (f: Frame) => void
) => Promise<{ readonly status: number; readonly frames: ReadonlyArray<Frame>; readonly text: string }>

/** Asserts the head and the start commit's events reach the client before `startRunFollowing` returns. */
export const expectWritesBeforeReturn = async (held: HeldStart, start: Start, fields: Record<string, string>) => {
  held.returned = 0
  const g = gate()
  held.afterStart = () => g.wait()
  const order: Array<string> = []
  const { status, frames } = await start(fields, () => {
    order.push(held.returned > 0 ? "after" : "before")
    g.release()
  })
  held.afterStart = () => Effect.void
  expect(status).toBe(200)
  expect(order[0]).toBe("before")
  expect(frames.map((f) => f.id)).toEqual(frames.map((_, i) => i + 1))
  expect(frames.at(-1)?.event).toBe("RunStateChanged")
}

/** Asserts an empty text and an unknown session are refused with their typed error; `seen` gets any frame. */
export const expectRefused = async (start: Start, seen: Array<Frame>) => {
  const empty = await start({ text: "" }, (f) => seen.push(f))
  expect(empty.status).toBe(400)
  expect(JSON.parse(empty.text).code).toBe("invalid_argument")
  const unknown = await start({ text: "hi", sessionId: "ses_00000000000000000000000000" }, (f) => seen.push(f))
  expect([400, 404]).toContain(unknown.status)
}

/**
 * A start whose commit succeeded but whose call then failed (held until the first frame): asserts its
 * body is a 200 of gap-free frames that admitted a run; the frames, the run and its session.
 */
export const failAfterCommit = async (held: HeldStart, start: Start, fields: Record<string, string>) => {
  const g = gate()
  held.afterStart = () =>
    Effect.zipRight(g.wait(), Effect.fail(new Errors.Conflict({ message: "test: the start's answer failed" })))
  const { status, frames } = await start(fields, () => g.release())
  held.afterStart = () => Effect.void
  expect(status).toBe(200)
  expect(frames.length).toBeGreaterThan(0)
  expect(frames.map((f) => f.id)).toEqual(frames.map((_, i) => i + 1))
  const runId = frames.find((f) => f.event === "RunAccepted")?.data.runId
  const sessionId = frames[0]?.data.sessionId
  expect(runId).toBeDefined()
  return { frames, runId: runId!, sessionId }
}

/** Polls `GET /v1/runs/:id` (20 ms apart, up to 2 s) until the run ended; its state then. */
export const settle = async (get: (path: string) => Promise<unknown>, runId: string) => {
  const ended = (state: string) => ["Done", "Failed", "Cancelled"].includes(state)
  const state = await eventually(async () => ((await get(`/v1/runs/${runId}`)) as { state: string }).state, ended)
  return ended(state) ? state : "unsettled"
}
