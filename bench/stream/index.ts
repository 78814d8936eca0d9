/**
 * bench/stream: live delivery, measured from outside. The gateway (real SQLite journal) serves gRPC
 * and HTTP in this process; a client in another process opens N concurrent streams over gRPC
 * (HTTP/2) or SSE (HTTP/1.1) on 127.0.0.1, each starting one run whose model streams deltas. Latency
 * is from the journal's commit of an event (a thin wrapper stamps when each append returned) to its
 * receipt by the client, both on the epoch clock (`performance.timeOrigin + now`).
 *
 * Scenarios: paced like a real model (a delta every PACE ms per stream) at 1, 50, 200 and 1,000
 * streams; the same 200 over SSE; and unpaced (deltas as fast as the kernel takes them) for the
 * throughput ceiling and the CPU this process spends per delivered event (`cpuUsPerEvent`); and the
 * paced run again while one SSE client has stopped reading a flooding session (`p99MsWithStalled`;
 * `stalledCutOff` is 1 when that client got the resumable `unavailable` error).
 */

import { spawn } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { connect } from "node:net"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { Caller, Gateway, type Journal, Kernel, type ModelProvider, ScriptedModel, type TapeEvent } from "@palyra/core"
import { checkedJournal } from "@palyra/core/testing"
import { Effect, type Layer, ManagedRuntime } from "effect"
import { percentile, quick, result, round, table } from "../lib/report.js"
import * as Attr from "./attr.js"
import { checkReceipts } from "./light.js"
import { serveBoth, stampedJournal } from "./served.js"

const here = dirname(fileURLToPath(import.meta.url))
// BENCH_STREAM_ATTR=1: each scenario's latency split into its legs (`attr.ts`), one JSON line each.
const attr = process.env.BENCH_STREAM_ATTR === "1"
if (attr) Attr.install()
const dir = mkdtempSync(join(tmpdir(), "palyra-bench-stream-"))
const now = () => performance.timeOrigin + performance.now()
// When each event committed, by session, indexed by `tapeSeq`. The stamp runs in the measured
// process for every event, so it is kept cheap (no per-event key string or map entry): its CPU is
// counted in `cpuUsPerEvent` with the server's.
const committedAt = new Map<string, Array<number>>()
// When the scenario's last run started (its `InProgress` transition committed): events committed until
// then are the start burst's, the rest the steady state's (`p99Ms200Burst` / `p99Ms200Steady`).
let lastStartAt = 0
const stamp = (stored: ReadonlyArray<TapeEvent.TapeEvent>) => {
  const t = now()
  let session: string | undefined
  let at: Array<number> = []
  for (const e of stored) {
    if (e.sessionId !== session) {
      session = e.sessionId
      let found = committedAt.get(session)
      if (found === undefined) {
        found = []
        committedAt.set(session, found)
      }
      at = found
    }
    at[e.tapeSeq] = t
    if (e._tag === "RunStateChanged" && e.to === "InProgress") lastStartAt = t
  }
}
/** When the event `<sessionId>:<tapeSeq>` (the client's receipt key) committed, if it did in this scenario. */
const committedOf = (key: string): number | undefined => {
  const colon = key.lastIndexOf(":")
  return committedAt.get(key.slice(0, colon))?.[Number(key.slice(colon + 1))]
}
// The stamp wraps both forms of the append (the tape calls the plain one, `Journal.appendNowOf`);
// BENCH_APPEND_NOW=0 leaves the plain form out, so the tape takes its Effect form (for A/B runs).
const timed = stampedJournal(join(dir, "stream.db"), stamp, { plainForm: process.env.BENCH_APPEND_NOW !== "0" })

// The client's message says how to answer: "bench <deltas> <pace ms>".
const scripted = ScriptedModel.make(
  (request) => {
    const m = /bench (\d+) (\d+)(?: (\d+))?/.exec(JSON.stringify(request.messages.at(-1)))
    const size = Number(m?.[3] ?? 0)
    const deltas = Number(m?.[1] ?? 5)
    const pace = Number(m?.[2] ?? 0)
    return {
      text: Array.from({ length: deltas }, (_, i) =>
        size > 0 ? `${i} words `.repeat(size / 8).slice(0, size) : `word${i} `
      ),
      ...(pace > 0 ? { delayPerDelta: `${pace} millis` } : {})
    }
  },
  { recordPrompts: false }
)
// BENCH_JOIN=0: the model's plain form without its `more` (the next delta is at hand), so the loop
// appends every delta on its own instead of joining the deltas of one burst (for A/B runs).
const { streamToNow } = scripted
const model: ModelProvider.Service =
  process.env.BENCH_JOIN === "0" && streamToNow !== undefined
    ? { ...scripted, streamToNow: (request, sink) => streamToNow(request, (event) => sink(event)) }
    : scripted
// The kernel as the daemon assembles it (`Kernel.layer`): the journal's plain append reaches the
// tape. BENCH_STREAM_CHECKED=1: the journal wrapped in `@palyra/core/testing`'s `checkedJournal` (the
// run-state check every test's `gatewayLayer` adds), as this bench ran until round 14: its `append`
// is a new function without the journal's plain form, so the tape took its Effect form (a fiber
// step per lock, an `Effect.gen` per append) — a path the daemon never takes (PERF-NOTES round 14).
const journal = process.env.BENCH_STREAM_CHECKED === "1" ? checkedJournal(timed) : timed
const runtime = ManagedRuntime.make(
  Kernel.layer({
    model,
    journal,
    coalesceChars: 1,
    // A stalled client is cut off 1,024 events behind (the default is 4,096).
    liveBufferEvents: 1024,
    // BENCH_STARTS=<n>: the Gateway's start gate (`maxConcurrentStarts`; Infinity: none), for A/B runs.
    ...(process.env.BENCH_STARTS === undefined ? {} : { maxConcurrentStarts: Number(process.env.BENCH_STARTS) }),
    // The flooding session's prompt grows by ~1 MB a run.
    budgets: { maxTokensPerRun: 1e9, maxTokensPerSession: 1e12, maxEventsPerTurn: 1e6 }
  }) as Layer.Layer<Gateway.Gateway | Journal.Journal>
)
const TOKEN = "bench-token-0123456789"
const tokens = [{ token: TOKEN, principal: "bench" }]

interface Scenario {
  readonly name: string
  readonly streams: number
  readonly deltas: number
  readonly paceMs: number
  readonly wire: "grpc" | "sse"
  readonly spread?: boolean
}
interface Figures {
  readonly p50: number
  readonly p99: number
  readonly perSec: number
  readonly events: number
  readonly cpuUsPerEvent: number
  /** p99 of the events committed while runs were still starting, and of those after. */
  readonly p99Burst: number
  readonly p99Steady: number
}

/** The client process: started once, sent one scenario at a time over IPC. */
const startClient = (grpcUrl: string, httpUrl: string) =>
  new Promise<{ run: (s: Scenario) => Promise<Receipts>; close: () => void }>((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [
        // BENCH_STREAM_CLIENT_PROF=<dir>: a CPU profile of the client process.
        ...(process.env.BENCH_STREAM_CLIENT_PROF
          ? ["--cpu-prof", `--cpu-prof-dir=${process.env.BENCH_STREAM_CLIENT_PROF}`]
          : []),
        "--conditions=@palyra/source",
        "--import",
        "tsx",
        join(here, "client.ts"),
        grpcUrl,
        httpUrl,
        TOKEN
      ],
      { cwd: here, stdio: ["ignore", "inherit", "inherit", "ipc"] }
    )
    let waiting: ((r: Receipts) => void) | undefined
    child.on("exit", (code) => code !== 0 && reject(new Error(`the client exited ${code}`)))
    child.on("message", (m: "ready" | Receipts) => {
      if (m === "ready") {
        resolve({
          run: (s) =>
            new Promise<Receipts>((r) => {
              waiting = r
              child.send(s)
            }),
          close: () => child.send("exit")
        })
      } else waiting?.(m)
    })
  })
interface Receipts {
  readonly elapsedMs: number
  readonly receipts: Array<[string, number]>
  readonly self?: Attr.ClientSelf
}

const main = async () => {
  const { grpc, http, close } = await serveBoth(runtime, tokens)
  const client = await startClient(grpc.url, http.url)
  let round_ = 0
  const measure = async (s: Omit<Scenario, "name">): Promise<Figures> => {
    const scenario = { ...s, name: `r${++round_}` }
    if (attr) Attr.begin()
    const cpu0 = process.cpuUsage()
    const { elapsedMs, receipts, self } = await client.run(scenario)
    const cpu = process.cpuUsage(cpu0)
    if (attr) Attr.end()
    checkReceipts(receipts)
    // The journal's trace (if on) is written at least once a second: wait for this scenario's lines.
    if (attr && process.env.PALYRA_JOURNAL_TRACE) await new Promise((r) => setTimeout(r, 1100))
    if (attr)
      Attr.report(
        `${s.wire} ${s.streams}${s.spread ? " spread" : ""} pace ${s.paceMs}`,
        receipts,
        committedOf,
        self,
        lastStartAt
      )
    const latencies: Array<number> = []
    const burst: Array<number> = []
    const steady: Array<number> = []
    for (const [key, received] of receipts) {
      const committed = committedOf(key)
      if (committed === undefined) continue
      latencies.push(received - committed)
      ;(committed <= lastStartAt ? burst : steady).push(received - committed)
    }
    committedAt.clear()
    lastStartAt = 0
    latencies.sort((a, b) => a - b)
    burst.sort((a, b) => a - b)
    steady.sort((a, b) => a - b)
    return {
      p50: percentile(latencies, 50),
      p99: percentile(latencies, 99),
      perSec: receipts.length / (elapsedMs / 1000),
      events: receipts.length,
      cpuUsPerEvent: (cpu.user + cpu.system) / receipts.length,
      p99Burst: burst.length === 0 ? 0 : percentile(burst, 99),
      p99Steady: steady.length === 0 ? 0 : percentile(steady, 99)
    }
  }
  const PACE = quick ? 50 : 200
  const DELTAS = quick ? 5 : 20
  const paced = (streams: number, wire: "grpc" | "sse" = "grpc") =>
    measure({ streams, deltas: DELTAS, paceMs: PACE, wire })
  // BENCH_STREAM_PROFILE=1: only the unpaced gRPC run (=sse: SSE), larger, for `node --cpu-prof` on this process.
  if (process.env.BENCH_STREAM_PROFILE) {
    const wire = process.env.BENCH_STREAM_PROFILE === "sse" ? "sse" : "grpc"
    await measure({ streams: 20, deltas: 20, paceMs: 0, wire })
    const f = await measure({ streams: 200, deltas: 200, paceMs: 0, wire })
    console.log(JSON.stringify(f))
    client.close()
    await close()
    return
  }
  // The same 200 paced gRPC streams with their starts spread over one pace (`p99Ms200Spread`): the
  // deltas of different streams are due at different times instead of all in the same millisecond,
  // so this measures delivery rather than the cost of a whole 200-stream burst.
  const spread = (streams: number) => measure({ streams, deltas: DELTAS, paceMs: PACE, wire: "grpc", spread: true })
  // BENCH_STREAM_ONLY=200: only the 200-stream paced runs (gRPC, SSE, gRPC spread), BENCH_STREAM_REPEAT
  // times (default 3) in this process, for A/B runs of the gRPC delivery path.
  if (process.env.BENCH_STREAM_ONLY === "200") {
    await paced(5)
    for (let i = 0; i < Number(process.env.BENCH_STREAM_REPEAT ?? 3); i++) {
      const g = await paced(200)
      const s = await paced(200, "sse")
      const j = await spread(200)
      console.log(
        JSON.stringify({
          p99Ms200: round(g.p99, 2),
          p50Ms200: round(g.p50, 2),
          p99Ms200Sse: round(s.p99, 2),
          p99Ms200Spread: round(j.p99, 2),
          p99Ms200SpreadSteady: round(j.p99Steady, 2),
          cpuUs200: round(g.cpuUsPerEvent, 1),
          cpuUs200Sse: round(s.cpuUsPerEvent, 1)
        })
      )
    }
    client.close()
    await close()
    rmSync(dir, { recursive: true, force: true })
    return
  }
  // One client stops reading its socket while its session floods (1 KB deltas, far more than the
  // kernel's socket buffers hold); the paced streams of other sessions must not notice.
  let floods = 0
  const withStalledRun = async (floodRuns: number, streams: number) => {
    const stalled = await runtime.runPromise(
      Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const caller = Caller.user("bench")
        const first = yield* gateway.sendMessage(caller, { text: "bench 1 0", key: `flood-${++floods}` })
        return first.session.id
      })
    )
    const socket = connect(http.port, "127.0.0.1")
    let stalledBytes = ""
    socket.on("data", (d: Buffer) => {
      stalledBytes += d.toString("latin1")
    })
    socket.write(
      `GET /v1/sessions/${stalled}/events?after=0 HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${TOKEN}\r\n\r\n`
    )
    socket.pause()
    const flooding = runtime.runPromise(
      Effect.forEach(
        Array.from({ length: floodRuns }, (_, i) => i),
        () =>
          Effect.flatMap(Gateway.Gateway, (g) =>
            Effect.flatMap(g.sendMessage(Caller.user("bench"), { text: "bench 900 0 1000", sessionId: stalled }), (r) =>
              g.awaitRun(Caller.user("bench"), r.run.id)
            )
          ),
        { discard: true }
      )
    )
    const figures = await paced(streams)
    await flooding
    socket.resume()
    await new Promise((r) => setTimeout(r, 500))
    socket.destroy()
    const cutOff = stalledBytes.includes("event: error") && stalledBytes.includes('"code":"unavailable"')
    return { figures, cutOff }
  }
  // BENCH_STREAM_ONLY=1000: only the 1,000-stream paced run, BENCH_STREAM_REPEAT times (default 3)
  // in this process, for A/B runs of anything that moves work between event-loop phases.
  if (process.env.BENCH_STREAM_ONLY === "1000") {
    await paced(5)
    for (let i = 0; i < Number(process.env.BENCH_STREAM_REPEAT ?? 3); i++) {
      const t = await paced(quick ? 100 : 1000)
      console.log(JSON.stringify({ p99Ms1000: round(t.p99, 2), p50Ms1000: round(t.p50, 2) }))
    }
    client.close()
    await close()
    rmSync(dir, { recursive: true, force: true })
    return
  }
  // BENCH_STREAM_ONLY=stalled: only the paced run beside a flooding session with a stalled client
  // (`p99MsWithStalled`), BENCH_STREAM_REPEAT times (default 3) in this process, for A/B runs.
  if (process.env.BENCH_STREAM_ONLY === "stalled") {
    await paced(5)
    for (let i = 0; i < Number(process.env.BENCH_STREAM_REPEAT ?? 3); i++) {
      const s = await withStalledRun(quick ? 8 : 24, quick ? 20 : 200)
      console.log(JSON.stringify({ p99MsWithStalled: round(s.figures.p99, 2), stalledCutOff: s.cutOff ? 1 : 0 }))
    }
    client.close()
    await close()
    rmSync(dir, { recursive: true, force: true })
    return
  }
  await paced(5) // warm-up
  const one = await paced(1)
  const fifty = await paced(quick ? 20 : 50)
  const many = await paced(quick ? 50 : 200)
  const manySse = await paced(quick ? 50 : 200, "sse")
  const manySpread = await spread(quick ? 50 : 200)
  const thousand = await paced(quick ? 100 : 1000)
  const stalledRun = await withStalledRun(quick ? 8 : 24, quick ? 20 : 200)
  const withStalled = stalledRun.figures
  const stalledCutOff = stalledRun.cutOff
  const unpaced = await measure({ streams: quick ? 20 : 200, deltas: quick ? 50 : 200, paceMs: 0, wire: "grpc" })
  const unpacedSse = await measure({ streams: quick ? 20 : 200, deltas: quick ? 50 : 200, paceMs: 0, wire: "sse" })
  client.close()
  await close()
  rmSync(dir, { recursive: true, force: true })
  const row = (label: string, streams: number, f: Figures) => ({
    run: label,
    streams,
    "events/s": Math.round(f.perSec),
    "p50 ms": round(f.p50, 3),
    "p99 ms": round(f.p99, 3),
    "p99 start burst / after": `${round(f.p99Burst, 1)} / ${round(f.p99Steady, 1)}`,
    "server CPU µs/event": round(f.cpuUsPerEvent, 1),
    events: f.events
  })
  table(
    `live streams, client in another process (latency: journal commit → client receipt); paced: ${DELTAS} deltas ${PACE} ms apart. Shared 2-core machine: figures are noisy`,
    [
      row("gRPC paced", 1, one),
      row("gRPC paced", quick ? 20 : 50, fifty),
      row("gRPC paced", quick ? 50 : 200, many),
      row("SSE paced", quick ? 50 : 200, manySse),
      row("gRPC paced, starts spread", quick ? 50 : 200, manySpread),
      row("gRPC paced", quick ? 100 : 1000, thousand),
      row("gRPC paced, 1 SSE client stalled", quick ? 20 : 200, withStalled),
      row("gRPC unpaced", quick ? 20 : 200, unpaced),
      row("SSE unpaced", quick ? 20 : 200, unpacedSse)
    ]
  )
  result("stream", {
    p50Ms1: round(one.p50, 3),
    p99Ms1: round(one.p99, 3),
    p50Ms50: round(fifty.p50, 3),
    p99Ms50: round(fifty.p99, 3),
    p50Ms200: round(many.p50, 3),
    p99Ms200: round(many.p99, 3),
    p99Ms200Burst: round(many.p99Burst, 3),
    p99Ms200Steady: round(many.p99Steady, 3),
    eventsPerSec200: Math.round(many.perSec),
    p99Ms200Sse: round(manySse.p99, 3),
    p99Ms200SseBurst: round(manySse.p99Burst, 3),
    p99Ms200SseSteady: round(manySse.p99Steady, 3),
    p99Ms200Spread: round(manySpread.p99, 3),
    p50Ms1000: round(thousand.p50, 3),
    p99Ms1000: round(thousand.p99, 3),
    p99MsWithStalled: round(withStalled.p99, 3),
    stalledCutOff: stalledCutOff ? 1 : 0,
    eventsPerSecMax: Math.round(Math.max(unpaced.perSec, unpacedSse.perSec)),
    cpuUsPerEvent: round(Math.min(unpaced.cpuUsPerEvent, unpacedSse.cpuUsPerEvent), 1)
  })
}

await main()
