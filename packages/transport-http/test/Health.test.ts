/**
 * Probes are open; readiness answers 503 `{ status: "starting" }` until the server is ready.
 */
import { ScriptedModel } from "@palyra/core"
import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ALICE, json, startServer, type TestServer } from "./fixtures.js"

let ready = false
let server: TestServer

beforeAll(async () => {
  server = await startServer({
    model: ScriptedModel.make(() => ({ text: "hi" })),
    serve: { ready: Effect.sync(() => ready) }
  })
})
afterAll(() => server.close())

describe("health probes", () => {
  it("answer without a token; readiness follows the probe", async () => {
    const starting = await fetch(`${server.base}/readyz`)
    expect(starting.status).toBe(503)
    expect(await json(starting)).toEqual({ status: "starting" })
    ready = true
    const up = await fetch(`${server.base}/readyz`)
    expect(up.status).toBe(200)
    expect(await json(up)).toEqual({ status: "ready" })
    expect(await json(await fetch(`${server.base}/healthz`))).toEqual({ status: "ok" })
    // The document is not open.
    expect((await fetch(`${server.base}/openapi.json`)).status).toBe(401)
    expect((await fetch(`${server.base}/openapi.json`, { headers: ALICE })).status).toBe(200)
  })
})
