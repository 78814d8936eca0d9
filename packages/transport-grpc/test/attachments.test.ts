import { createHash } from "node:crypto"
import { Code, ConnectError, createClient } from "@connectrpc/connect"
import { createGrpcTransport } from "@connectrpc/connect-node"
import { type Gateway, Journal, ScriptedModel } from "@palyra/core"
import { gatewayLayer } from "@palyra/core/testing"
import { Effect, type Layer, ManagedRuntime, Schedule } from "effect"
import { describe, expect, it } from "vitest"
import { Proto } from "../src/index.js"
import { bearer, servedFor } from "./served.js"

const png = Buffer.from(
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==",
  "base64"
)
const model = ScriptedModel.make(() => ({ text: "a dot" }))
const runtime = ManagedRuntime.make(
  gatewayLayer({ model, attachments: { images: true, maxBytes: 4096 } }) as Layer.Layer<
    Gateway.Gateway | Journal.Journal
  >
)
const served = servedFor(runtime)

const transport = () => createGrpcTransport({ baseUrl: served.url, interceptors: [bearer()] })

describe("attachments over gRPC (bytes)", () => {
  it("round trip: bytes in, digest references on the tape, the same bytes in the model's prompt", async () => {
    const gateway = createClient(Proto.GatewayService, transport())
    const sent = await gateway.routeMessage({
      target: { sessionKey: "pics" },
      text: "what is this?",
      attachments: [
        { data: png, name: "dot.png", mediaType: "" },
        { data: new TextEncoder().encode('{"k": 1}'), name: "data.json", mediaType: "application/json" }
      ]
    })
    await runtime.runPromise(
      Effect.flatMap(Journal.Journal, (j) => j.getRun(sent.runId as never)).pipe(
        Effect.repeat({
          schedule: Schedule.spaced("20 millis"),
          until: (r) => r._tag === "Some" && r.value.state === "Done"
        }),
        Effect.timeout("10 seconds")
      )
    )
    const { events } = await createClient(Proto.JournalService, transport()).readTape({
      sessionId: sent.sessionId,
      afterSeq: 0n,
      limit: 100
    })
    const user = events.find((e) => e.kind.case === "userMessage")
    const accepted = events.find((e) => e.kind.case === "runAccepted")
    if (user?.kind.case !== "userMessage" || accepted?.kind.case !== "runAccepted") throw new Error("missing events")
    const digest = createHash("sha256").update(png).digest("hex")
    expect(user.kind.value.attachments.map((a) => [a.name, a.mediaType, a.size, a.digest])).toEqual([
      ["dot.png", "image/png", BigInt(png.length), digest],
      ["data.json", "application/json", 8n, createHash("sha256").update('{"k": 1}').digest("hex")]
    ])
    expect(accepted.kind.value.attachments).toEqual(user.kind.value.attachments)
    const prompt = model.prompts.at(-1)!.messages.at(-1)!
    expect(prompt.role === "user" ? prompt.images?.map((i) => Buffer.from(i.data).equals(png)) : []).toEqual([true])
  })

  it("too large is RESOURCE_EXHAUSTED; a file that is neither image nor text is INVALID_ARGUMENT", async () => {
    const gateway = createClient(Proto.GatewayService, transport())
    const big = await gateway
      .routeMessage({ text: "x", attachments: [{ data: new Uint8Array(5000).fill(65), name: "", mediaType: "" }] })
      .catch((e: unknown) => e)
    expect((big as ConnectError).code).toBe(Code.ResourceExhausted)
    const binary = await gateway
      .routeMessage({
        text: "x",
        attachments: [{ data: Uint8Array.from([0, 159, 146, 150]), name: "", mediaType: "" }]
      })
      .catch((e: unknown) => e)
    expect(binary).toBeInstanceOf(ConnectError)
    expect((binary as ConnectError).code).toBe(Code.InvalidArgument)
  })
})
