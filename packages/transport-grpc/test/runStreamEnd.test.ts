/**
 * gRPC `RunStream`'s end: the stream's teardown (its scope's finalizers — the follower, the approval
 * registration, the stream gauge — then the trailers) waits for the event loop's check phase after
 * the publication that wrote the run's last events, so those frames (an HTTP/2 session sends them
 * from a native immediate at the start of that phase) leave before it. The signal is deterministic:
 * a `setImmediate` queued when the run's end was committed has run by the time the stream's scope
 * closes. The stream still ends exactly once, OK, with the run's end event last, and a resume after
 * the end is answered. A real gateway (in-memory journal, scripted model) on 127.0.0.1 and
 * connect-es's gRPC client.
 */
import { createClient } from "@connectrpc/connect"
import { createGrpcTransport } from "@connectrpc/connect-node"
import { Gateway, Journal, MemoryJournal, ScriptedModel } from "@palyra/core"
import { gatewayLayer, markingRunEndCheckPhase } from "@palyra/core/testing"
import { Effect, Layer, ManagedRuntime } from "effect"
import { describe, expect, it } from "vitest"
import { Proto } from "../src/index.js"
import { bearer, servedFor } from "./served.js"

// Per run id: whether the check phase after its end commit had come (set when it committed).
const marked = Effect.runSync(Effect.map(MemoryJournal.make(), markingRunEndCheckPhase))
const checkPassed = marked.checkPassed
const journalLayer = Layer.succeed(Journal.Journal, marked.journal)
// The stream's scope closing: a finalizer added after `startRunFollowing`'s own (so it runs first).
const teardowns: Array<[string, boolean | undefined]> = []
const decorated = Layer.effect(
  Gateway.Gateway,
  Effect.map(
    Gateway.Gateway,
    (g): Gateway.Service => ({
      ...g,
      startRunFollowing: (...args) =>
        Effect.tap(g.startRunFollowing(...args), (started) =>
          Effect.addFinalizer(() =>
            Effect.sync(() => teardowns.push([started.run.id, checkPassed.get(started.run.id)]))
          )
        )
    })
  )
)
const runtime = ManagedRuntime.make(
  Layer.provideMerge(
    decorated,
    gatewayLayer({
      model: ScriptedModel.make(() => ({ text: ["one ", "two ", "three"] })),
      journal: journalLayer
    }) as Layer.Layer<Gateway.Gateway | Journal.Journal>
  )
)
const served = servedFor(runtime)
const client = () =>
  createClient(Proto.GatewayService, createGrpcTransport({ baseUrl: served.url, interceptors: [bearer()] }))

/** A one-request RunStream (half-closed after it): its messages as `seq:case`, in order. */
const runStream = async (action: Proto.RunStreamRequest["action"]) => {
  const messages: Array<string> = []
  let sessionId = ""
  const requests = (async function* () {
    yield { action } as Proto.RunStreamRequest
  })()
  for await (const r of client().runStream(requests)) {
    if (r.payload.case === "sessionId") sessionId = r.payload.value
    messages.push(
      r.payload.case === "event" ? `${r.payload.value.tapeSeq}:${r.payload.value.kind.case}` : (r.payload.case ?? "")
    )
  }
  return { messages, sessionId }
}

describe("gRPC RunStream's end", () => {
  it("the stream's teardown runs after the check phase that sent the run's last events; it ends once, OK, the end last", async () => {
    const streams = await Promise.all(
      ["end-1", "end-2", "end-3"].map((key) =>
        runStream({ case: "start", value: { text: "hi", target: { sessionKey: key } } as never })
      )
    )
    for (const { messages } of streams) {
      expect(messages[0]).toBe("sessionId")
      const seqs = messages.slice(1).map((m) => Number(m.split(":")[0]))
      expect(seqs).toEqual(seqs.map((_, i) => i + 1))
      expect(messages.at(-1)).toMatch(/:runStateChanged$/)
    }
    expect(teardowns).toHaveLength(3)
    for (const [runId, passed] of teardowns) expect(passed, `run ${runId}'s stream torn down first`).toBe(true)

    // A resume after the run's end: nothing after its last seq, and the stream is answered.
    const last = streams[0]!
    const afterSeq = Number(last.messages.at(-1)!.split(":")[0])
    const resumed = await runStream({
      case: "resume",
      value: { sessionId: last.sessionId, afterSeq: BigInt(afterSeq) } as never
    })
    expect(resumed.messages).toEqual(["sessionId"])
  })
})
