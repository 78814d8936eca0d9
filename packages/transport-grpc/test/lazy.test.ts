import { Code, ConnectError } from "@connectrpc/connect"
import { type Gateway, type Journal, ScriptedModel } from "@palyra/core"
import { gatewayLayer } from "@palyra/core/testing"
import { type Layer, ManagedRuntime } from "effect"
import { describe, expect, it } from "vitest"
import { GrpcTransport, HealthProto, Proto } from "../src/index.js"
import * as GrpcServer from "../src/lazy.js"
import { servedFor, TOKEN } from "./served.js"

// The lazy server (what palyrad mounts) listens before its services are loaded; the first requests,
// several at once, wait for the load and are then served exactly like GrpcTransport.serve's.
const runtime = ManagedRuntime.make(
  gatewayLayer({ model: ScriptedModel.make(() => ({ text: ["Hello ", "lazily."] })) }) as Layer.Layer<
    Gateway.Gateway | Journal.Journal
  >
)
const served = servedFor(runtime, GrpcServer.serve({ port: 0, tokens: [{ token: TOKEN, principal: "alice" }] }))

describe("@palyra/transport-grpc/lazy", () => {
  it("serves concurrent first requests once its services load: auth, unary calls and RunStream", async () => {
    const alice = GrpcTransport.makeClient({ baseUrl: served.url, token: TOKEN })
    const stranger = GrpcTransport.makeClient({ baseUrl: served.url, token: "not-a-token-0123456789" })
    const [health, refused, routed] = await Promise.all([
      alice.health.check({ service: "" }),
      stranger.sessions.listSessions({}).then(
        () => undefined,
        (e: unknown) => ConnectError.from(e).code
      ),
      alice.gateway.routeMessage({ target: { sessionKey: "lazy" }, text: "hi" })
    ])
    expect(health.status).toBe(HealthProto.HealthCheckResponse_ServingStatus.SERVING)
    expect(refused).toBe(Code.Unauthenticated)
    expect(routed.runId).toMatch(/\S/)
    // A RunStream over gRPC (served by its own HTTP/2 writer) on the loaded services.
    const texts: Array<string> = []
    let final: Proto.RunState | undefined
    const requests = (async function* () {
      yield { action: { case: "start", value: { target: { sessionKey: "lazy-2" }, text: "hello" } } } as never
    })()
    for await (const r of alice.gateway.runStream(requests)) {
      if (r.payload.case !== "event") continue
      const kind = r.payload.value.kind
      if (kind.case === "assistantDelta") texts.push(kind.value.text)
      if (kind.case === "runStateChanged") final = kind.value.to
    }
    expect(final).toBe(Proto.RunState.DONE)
    expect(texts.join("")).toBe("Hello lazily.")
  })
})
