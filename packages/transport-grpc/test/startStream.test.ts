/**
 * RunStream's start over gRPC writes from the start commit: the session id and the run's first
 * events reach the client inside the start commit's publication, before `Gateway.startRunFollowing`
 * has returned to the transport; a refused start writes nothing; a start whose commit succeeded but
 * whose call then failed ends with its error after what was written, and a resume continues without
 * gap or duplicate. A real gateway (in-memory journal, scripted model) whose `startRunFollowing` is
 * held by the test until it lets it return, served on 127.0.0.1, and connect-es's gRPC client.
 */
import { Code, ConnectError, createClient } from "@connectrpc/connect"
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node"
import { Errors, type Gateway, type Journal, ScriptedModel } from "@palyra/core"
import { eventually, gate, gatewayLayer, holdStartRunFollowing, tapeSubscribers } from "@palyra/core/testing"
import { Effect, Layer, ManagedRuntime } from "effect"
import { beforeAll, describe, expect, it } from "vitest"
import { Proto } from "../src/index.js"
import { bearer, servedFor } from "./served.js"

const model = ScriptedModel.make(() => ({ text: ["Hello ", "from ", "the start."] }))

// The real kernel; its `startRunFollowing` answers only when the test's `held.afterStart` lets it.
const held = holdStartRunFollowing()
const runtime = ManagedRuntime.make(
  Layer.provideMerge(held.layer, gatewayLayer({ model }) as Layer.Layer<Gateway.Gateway | Journal.Journal>)
)
const served = servedFor(runtime)
const auth = bearer()
/** The protocol of the `describe` under way: gRPC (the direct writer) or Connect (connect-es's route). */
let protocol: "grpc" | "connect" = "grpc"
const client = () =>
  createClient(
    Proto.GatewayService,
    protocol === "grpc"
      ? createGrpcTransport({ baseUrl: served.url, interceptors: [auth] })
      : createConnectTransport({ baseUrl: served.url, httpVersion: "2", interceptors: [auth] })
  )

/**
 * A one-request RunStream, half-closed after it (`untilRunEnd`: kept open, and cancelled by the
 * client once a run's end arrives); every message as `seq:case`, and how the call ended.
 */
const runStream = async (
  action: Proto.RunStreamRequest["action"],
  onMessage: (m: string) => void = () => {},
  untilRunEnd = false
) => {
  const messages: Array<string> = []
  const abort = new AbortController()
  const requests = (async function* () {
    yield { action } as Proto.RunStreamRequest
    if (untilRunEnd) await new Promise((r) => abort.signal.addEventListener("abort", r))
  })()
  try {
    for await (const r of client().runStream(requests, { signal: abort.signal })) {
      const m = r.payload.case === "event" ? `${r.payload.value.tapeSeq}:${r.payload.value.kind.case}` : "sessionId"
      messages.push(m)
      onMessage(m)
      if (r.payload.case === "sessionId") sessionId = r.payload.value
      const e = r.payload.case === "event" ? r.payload.value.kind : undefined
      if (untilRunEnd && e?.case === "runStateChanged" && e.value.to >= Proto.RunState.DONE) abort.abort()
    }
    return { messages, code: "OK" }
  } catch (e) {
    if (abort.signal.aborted) return { messages, code: "OK" }
    return { messages, code: Code[ConnectError.from(e).code] }
  }
}
const seqOf = (m: string) => Number(m.split(":")[0])
let sessionId = ""

/** The live followers attached to tapes (`palyra_tape_subscribers`). */
const subscribers = () => runtime.runPromise(tapeSubscribers)

describe.each(["grpc", "connect"] as const)("RunStream (%s) writes from its start commit", (p) => {
  beforeAll(() => {
    protocol = p
  })

  it("the session id and the start commit's events reach the client before startRunFollowing returns", async () => {
    held.returned = 0
    const g = gate()
    held.afterStart = () => g.wait()
    const order: Array<string> = []
    const { messages, code } = await runStream(
      { case: "start", value: { text: "hi", target: { sessionKey: `early-1-${p}` } } as never },
      () => {
        order.push(held.returned > 0 ? "after" : "before")
        g.release()
      }
    )
    held.afterStart = () => Effect.void
    expect(code).toBe("OK")
    expect(messages[0]).toBe("sessionId")
    // The first message and the start commit's events arrived while the start call was still held.
    expect(order[0]).toBe("before")
    // Gap-free from the session's first event (its creation and the run's start: the start commit).
    const seqs = messages.slice(1).map(seqOf)
    expect(seqs.slice(0, 2)).toEqual([1, 2])
    expect(seqs).toEqual(seqs.map((_, i) => i + 1))
  })

  it("a refused start answers its typed error with nothing written", async () => {
    const before = await subscribers()
    const written: Array<string> = []
    const empty = await runStream(
      { case: "start", value: { text: "", target: { sessionKey: `early-2-${p}` } } as never },
      (m) => written.push(m)
    )
    expect(empty.code).toBe("InvalidArgument")
    const unknown = await runStream(
      { case: "start", value: { text: "hi", target: { sessionId: "ses_00000000000000000000000000" } } as never },
      (m) => written.push(m)
    )
    expect(unknown.code).toMatch(/NotFound|InvalidArgument/)
    expect(written).toEqual([])
    // Nothing left attached.
    expect(await eventually(subscribers, (n) => n === before)).toBe(before)
  })

  it("a client gone mid-start (after the start commit's events, before the call returned) leaves nothing attached; the run goes on", async () => {
    const before = await subscribers()
    const g = gate()
    held.afterStart = () => g.wait()
    const abort = new AbortController()
    const got: Array<string> = []
    const requests = (async function* () {
      yield { action: { case: "start", value: { text: "hi", target: { sessionKey: `early-4-${p}` } } } } as never
      await new Promise((r) => abort.signal.addEventListener("abort", r))
    })()
    let id = ""
    await (async () => {
      for await (const r of client().runStream(requests, { signal: abort.signal })) {
        if (r.payload.case === "sessionId") id = r.payload.value
        got.push(r.payload.case ?? "")
        if (r.payload.case === "event") abort.abort()
      }
    })().catch(() => undefined)
    g.release()
    held.afterStart = () => Effect.void
    expect(got.slice(0, 2)).toEqual(["sessionId", "event"])
    expect(await eventually(subscribers, (n) => n === before)).toBe(before)
    // The admitted run still ends; its tape is gap-free from the start.
    sessionId = id
    const tape = await runStream({ case: "resume", value: { sessionId: id, afterSeq: 0n } as never }, () => {}, true)
    expect(tape.code).toBe("OK")
    const seqs = tape.messages.slice(1).map(seqOf)
    expect(seqs).toEqual(seqs.map((_, i) => i + 1))
    expect(tape.messages.at(-1)).toMatch(/runStateChanged/)
  })

  it("a start whose commit succeeded but whose call then failed ends with its error after what it wrote; a resume continues without gap or duplicate", async () => {
    const g = gate()
    held.afterStart = () =>
      Effect.zipRight(g.wait(), Effect.fail(new Errors.Conflict({ message: "test: the start's answer failed" })))
    const first = await runStream(
      { case: "start", value: { text: "hi", target: { sessionKey: `early-3-${p}` } } as never },
      () => g.release()
    )
    held.afterStart = () => Effect.void
    expect(first.code).toBe("FailedPrecondition")
    expect(first.messages[0]).toBe("sessionId")
    const seen = first.messages.slice(1).map(seqOf)
    expect(seen.length).toBeGreaterThan(0)
    expect(seen).toEqual(seen.map((_, i) => i + 1))
    // The run was admitted and goes on: a resume after the start commit (seqs 1-2) gets the rest of
    // it, gap-free up to its end, and agrees with what the failed call had written.
    const resumed = await runStream({ case: "resume", value: { sessionId, afterSeq: 2n } as never }, () => {}, true)
    const rest = resumed.messages.slice(1)
    expect(resumed.code).toBe("OK")
    expect(rest.length).toBeGreaterThan(0)
    expect(rest.map(seqOf)).toEqual(rest.map((_, i) => 3 + i))
    expect(first.messages.slice(3)).toEqual(rest.slice(0, first.messages.length - 3))
  })
})
