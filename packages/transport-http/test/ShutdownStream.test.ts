/**
 * A stream opened once the app's `shutdown` has already completed ends cleanly: the body is ended
 * by the shutdown watcher before its follower is open, and nothing is pushed after that end (it used
 * to push the `connected` comment after EOF, which tore the response down). The HttpApi app on a
 * real Node server, a real `fetch`, both stream shapes (a run's stream, a session's events).
 */
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { type Gateway, type Journal, ScriptedModel } from "@palyra/core"
import { gatewayLayer } from "@palyra/core/testing"
import { Effect, Exit, type Layer, ManagedRuntime, Scope } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { HttpTransport } from "../src/index.js"

const runtime = ManagedRuntime.make(
  gatewayLayer({ model: ScriptedModel.make([{ text: "hi" }]), tools: [] }) as Layer.Layer<
    Gateway.Gateway | Journal.Journal
  >
)
let scope: Scope.CloseableScope
let server: Server
let base = ""
const ALICE = { authorization: "Bearer alice-token" }

beforeAll(async () => {
  scope = await runtime.runPromise(Scope.make())
  const options = {
    tokens: [{ token: "alice-token", principal: "alice" }],
    heartbeatSeconds: 15,
    // Already over: every stream opened from here on is ended at once.
    shutdown: Effect.void
  }
  const handler = await runtime.runPromise(
    Effect.flatMap(HttpTransport.httpApp(options), NodeHttpServer.makeHandler).pipe(Scope.extend(scope))
  )
  server = createServer(handler)
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()))
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
})
afterAll(async () => {
  await new Promise<void>((r) => server.close(() => r()))
  await runtime.runPromise(Scope.close(scope, Exit.void))
  await runtime.dispose()
})

describe("a stream opened after shutdown", () => {
  it("a run's stream ends cleanly, and so does a session's events stream", async () => {
    const started = await fetch(`${base}/v1/runs?stream=true`, {
      method: "POST",
      headers: { ...ALICE, "content-type": "application/json" },
      body: JSON.stringify({ text: "hello" })
    })
    expect(started.status).toBe(200)
    // Read to the end: a torn-down response rejects here ("terminated").
    const text = await started.text()
    expect(text).not.toContain("event: error")
    const session = await fetch(`${base}/v1/sessions`, {
      method: "POST",
      headers: { ...ALICE, "content-type": "application/json" },
      body: "{}"
    })
    expect(session.status).toBe(201)
    const sessionId = ((await session.json()) as { id: string }).id
    const events = await fetch(`${base}/v1/sessions/${sessionId}/events`, { headers: ALICE })
    expect(events.status).toBe(200)
    await expect(events.text()).resolves.toBeTypeOf("string")
  })
})
