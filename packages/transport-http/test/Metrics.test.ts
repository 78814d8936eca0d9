/**
 * `GET /metrics` in Prometheus' text format, parsed with a Prometheus text parser: the open-streams
 * gauge follows an SSE stream, and the run-transition counter (recorded by the kernel at every
 * state change) moves after a run.
 */
import { Metrics, ScriptedModel } from "@palyra/core"
import { Effect, Exit, Scope } from "effect"
import parsePrometheus from "parse-prometheus-text-format"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Sse } from "../src/index.js"
import { ALICE, json, startServer, type TestServer } from "./fixtures.js"

let server: TestServer
let open: TestServer

beforeAll(async () => {
  const model = ScriptedModel.make(() => ({ text: "hi" }))
  ;[server, open] = await Promise.all([startServer({ model }), startServer({ model, serve: { metricsPublic: true } })])
})
afterAll(() => Promise.all([server.close(), open.close()]))

interface Family {
  readonly name: string
  readonly type: string
  readonly metrics: ReadonlyArray<{ readonly value?: string; readonly labels?: Record<string, string> }>
}

const scrape = async (base: string, headers: Record<string, string> = ALICE) => {
  const response = await fetch(`${base}/metrics`, { headers })
  expect(response.status).toBe(200)
  expect(response.headers.get("content-type")).toMatch(/^text\/plain/)
  return parsePrometheus(await response.text()) as ReadonlyArray<Family>
}

const sample = (families: ReadonlyArray<Family>, name: string, labels: Record<string, string>) => {
  const family = families.find((f) => f.name === name)
  const found = family?.metrics.find((m) => Object.entries(labels).every(([k, v]) => m.labels?.[k] === v))
  return Number(found?.value ?? 0)
}

describe("GET /metrics", () => {
  it("needs the bearer token unless the server runs with metricsPublic", async () => {
    expect((await fetch(`${server.base}/metrics`)).status).toBe(401)
    expect((await fetch(`${server.base}/metrics`, { headers: { authorization: "Bearer nope" } })).status).toBe(401)
    expect((await fetch(`${open.base}/metrics`)).status).toBe(200)
  })

  it("the open-streams gauge counts an SSE stream while it is open", async () => {
    const sent = await json(
      await fetch(`${server.base}/v1/runs`, {
        method: "POST",
        headers: { ...ALICE, "content-type": "application/json" },
        body: JSON.stringify({ text: "hi", sessionKey: "metrics" })
      })
    )
    const before = sample(await scrape(server.base), "palyra_open_streams", { transport: "http" })
    const response = await fetch(`${server.base}/v1/sessions/${sent.sessionId}/events`, { headers: ALICE })
    const events = Sse.fromResponse(response)
    await events.next() // the first tape event: the stream is open
    const during = await scrape(server.base)
    expect(during.find((f) => f.name === "palyra_open_streams")?.type).toBe("GAUGE")
    expect(sample(during, "palyra_open_streams", { transport: "http" })).toBe(before + 1)
    await events.return(undefined)
    let after = Number.NaN
    for (let i = 0; i < 100 && after !== before; i++) {
      await new Promise((r) => setTimeout(r, 20))
      after = sample(await scrape(server.base), "palyra_open_streams", { transport: "http" })
    }
    expect(after).toBe(before)
  })

  it("the run-transition counter and the run-duration histogram move after a run", async () => {
    const done = () => scrape(server.base).then((f) => sample(f, "palyra_run_transitions_total", { to: "Done" }))
    const before = await done()
    // A histogram family's sample carries its `count` (the runs whose duration it recorded).
    const ended = (families: ReadonlyArray<Family>) =>
      Number(
        (families.find((f) => f.name === "palyra_run_duration_seconds")?.metrics[0] as { count?: string } | undefined)
          ?.count ?? 0
      )
    const durations = ended(await scrape(server.base))
    const sent = await json(
      await fetch(`${server.base}/v1/runs`, {
        method: "POST",
        headers: { ...ALICE, "content-type": "application/json" },
        body: JSON.stringify({ text: "hi" })
      })
    )
    await server.quiet()
    const run = await json(await fetch(`${server.base}/v1/runs/${sent.runId}`, { headers: ALICE }))
    expect(run.state).toBe("Done")
    const families = await scrape(server.base)
    expect(families.find((f) => f.name === "palyra_run_transitions_total")?.type).toBe("COUNTER")
    expect(sample(families, "palyra_run_transitions_total", { to: "Done" })).toBe(before + 1)
    expect(sample(families, "palyra_run_transitions_total", { to: "InProgress" })).toBeGreaterThanOrEqual(1)
    expect(families.find((f) => f.name === "palyra_run_duration_seconds")?.type).toBe("HISTOGRAM")
    expect(ended(families)).toBe(durations + 1)
  })

  it("the event-loop delay is sampled into a gauge while monitoring runs", async () => {
    const scope = Effect.runSync(Scope.make())
    await Effect.runPromise(Scope.extend(Metrics.monitorEventLoop({ interval: "200 millis" }), scope))
    // Block the loop for 60 ms in the middle of a sampling interval.
    await new Promise((r) => setTimeout(r, 50))
    const until = Date.now() + 60
    while (Date.now() < until) {}
    let max = 0
    for (let i = 0; i < 40 && max <= 0.02; i++) {
      await new Promise((r) => setTimeout(r, 50))
      max = sample(await scrape(server.base), "palyra_event_loop_delay_seconds", { stat: "max" })
    }
    await Effect.runPromise(Scope.close(scope, Exit.void))
    expect(max).toBeGreaterThan(0.02)
  })
})
