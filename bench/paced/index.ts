/**
 * bench/paced: what one paced delta allocates and costs on the server's side, without a wire — the
 * daemon's kernel (`Kernel.layer` over the SQLite journal, its plain append), the scripted model
 * pacing its deltas with `delayPerDelta`, every run followed by a plain `Follower` (as the
 * transports' hot paths take it). Over the steady window (after every run has started, before any
 * ends): bytes allocated per delta by V8's sampling heap profiler with collected objects included
 * (attributed by file), the main thread's scavenges and their pauses, and its CPU per delta.
 *
 * `pnpm bench paced [--quick]`; P_ALLOC_PROF=<file>: also write the window's sampling profile
 * (summarize with `node bench/lib/allocprof.mjs <file>`). Knobs: PACED_STREAMS (200), PACED_PACE_MS (200), PACED_DELTAS (30; the window is all but 6 of them).
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { createServer } from "node:http"
import { Session } from "node:inspector"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { constants, PerformanceObserver } from "node:perf_hooks"
import { Caller, type Follower, Gateway, type Journal, Kernel, ScriptedModel } from "@palyra/core"
import { Models } from "@palyra/core/models"
import { SqliteJournal } from "@palyra/journal"
import { Effect, Exit, type Layer, ManagedRuntime, Scope } from "effect"
import { quick, result, round, table } from "../lib/report.js"

const STREAMS = Number(process.env.PACED_STREAMS ?? 200)
const PACE = Number(process.env.PACED_PACE_MS ?? (quick ? 50 : 200))
const DELTAS = Number(process.env.PACED_DELTAS ?? (quick ? 20 : 30))
const dir = mkdtempSync(join(tmpdir(), "palyra-paced-"))

// PACED_MODEL=openai: the real provider's path instead — the AI SDK adapter over a local
// OpenAI-compatible server (node:http) streaming one SSE chunk per delta, paced by the server.
const viaOpenAi = process.env.PACED_MODEL === "openai"
const chunk = (delta: object, finish: string | null) =>
  `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "bench", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
const server = viaOpenAi
  ? createServer((req, res) => {
      req.resume()
      req.on("end", () => {
        res.writeHead(200, { "content-type": "text/event-stream" })
        res.write(chunk({ role: "assistant", content: "" }, null))
        let i = 0
        const next = () => {
          if (i === DELTAS) return res.end(`${chunk({}, "stop")}data: [DONE]\n\n`)
          res.write(chunk({ content: `word${i++} ` }, null))
          setTimeout(next, PACE)
        }
        setTimeout(next, PACE)
      })
    })
  : undefined
if (server) await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
const port = (server?.address() as AddressInfo | null)?.port
const model = viaOpenAi
  ? await Effect.runPromise(Models.fromSpec(`openai-compatible:http://127.0.0.1:${port}/v1#bench`, {}))
  : ScriptedModel.make(
      () => ({ text: Array.from({ length: DELTAS }, (_, i) => `word${i} `), delayPerDelta: `${PACE} millis` }),
      { recordPrompts: false }
    )
const runtime = ManagedRuntime.make(
  Kernel.layer({
    model,
    journal: SqliteJournal.layer({ filename: join(dir, "paced.db") }),
    coalesceChars: 1
  }) as Layer.Layer<Gateway.Gateway | Journal.Journal>
)

let deltas = 0
const gc = { scavenges: 0, scavengeMs: 0, maxMs: 0, over10: 0, majors: 0, majorMs: 0 }
let inWindow = false
new PerformanceObserver((list) => {
  if (!inWindow) return
  for (const e of list.getEntries()) {
    const kind = (e as unknown as { readonly detail?: { readonly kind?: number } }).detail?.kind
    if (kind === constants.NODE_PERFORMANCE_GC_MINOR) {
      gc.scavenges++
      gc.scavengeMs += e.duration
      gc.maxMs = Math.max(gc.maxMs, e.duration)
      if (e.duration > 10) gc.over10++
    } else {
      gc.majors++
      gc.majorMs += e.duration
    }
  }
}).observe({ entryTypes: ["gc"] })

const session = new Session()
session.connect()
const post = <T>(method: string, params?: object) =>
  new Promise<T>((resolve, reject) =>
    session.post(method, params, (error, value) => (error ? reject(error) : resolve(value as T)))
  )

interface Node {
  readonly callFrame: { readonly url: string; readonly functionName: string }
  readonly selfSize: number
  readonly children?: ReadonlyArray<Node>
}
const byFile = (head: Node) => {
  const files = new Map<string, number>()
  let total = 0
  const walk = (n: Node) => {
    if (n.selfSize > 0) {
      const f = n.callFrame.url
        .replace(/^.*node_modules\/\.pnpm\/[^/]+\/node_modules\//, "")
        .replace(/^.*\/packages\//, "")
      files.set(f || "(native)", (files.get(f || "(native)") ?? 0) + n.selfSize)
      total += n.selfSize
    }
    for (const c of n.children ?? []) walk(c)
  }
  walk(head)
  return { total, files }
}

const main = async () => {
  const caller = Caller.user("bench")
  const scope = await runtime.runPromise(Scope.make())
  const followers: Array<Follower.Follower> = []
  const follow = (follower: Follower.Follower) => {
    followers.push(follower)
    // `onReady` calls its `wake` once: re-armed after every drain, until the run's end.
    const drain = (): void => {
      for (;;) {
        const taken = follower.take()
        if (taken === undefined) {
          follower.onReady(drain)
          return
        }
        if (!Array.isArray(taken)) return
        for (const e of taken) if (e._tag === "AssistantDelta") deltas++
      }
    }
    drain()
  }
  // A warm-up run, then all runs started at once.
  await runtime.runPromise(
    Effect.flatMap(Gateway.Gateway, (g) =>
      Effect.flatMap(g.sendMessage(caller, { text: "warm" }), (r) => g.awaitRun(caller, r.run.id))
    )
  )
  const started = await runtime.runPromise(
    Effect.forEach(
      Array.from({ length: STREAMS }, (_, i) => i),
      (i) =>
        Effect.flatMap(Gateway.Gateway, (g) =>
          Effect.map(g.startRunFollowing(caller, { text: `paced ${i}` }), (s) => {
            follow(s.follower)
            return s.run.id
          })
        ),
      { concurrency: "unbounded" }
    ).pipe(Scope.extend(scope))
  )
  // The steady window: from two paces after the last start to three paces before the first end.
  await new Promise((r) => setTimeout(r, 2 * PACE))
  const from = deltas
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  if (global.gc) global.gc()
  await post("HeapProfiler.startSampling", {
    samplingInterval: 4096,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true
  })
  inWindow = true
  await new Promise((r) => setTimeout(r, (DELTAS - 6) * PACE))
  inWindow = false
  const { profile } = await post<{ profile: { head: Node } }>("HeapProfiler.stopSampling")
  const cpu = process.cpuUsage(cpu0)
  const wallMs = performance.now() - t0
  const n = deltas - from
  await runtime.runPromise(
    Effect.forEach(started, (id) => Effect.flatMap(Gateway.Gateway, (g) => g.awaitRun(caller, id)), {
      concurrency: "unbounded",
      discard: true
    })
  )
  if (process.env.P_ALLOC_PROF) writeFileSync(process.env.P_ALLOC_PROF, JSON.stringify(profile))
  const { total, files } = byFile(profile.head)
  const kbPerDelta = total / 1024 / n
  const top = [...files].sort((a, b) => b[1] - a[1]).slice(0, 8)
  table(
    `paced deltas, server side, no wire${viaOpenAi ? " (the AI SDK adapter over a local OpenAI-compatible server)" : ""}: ${STREAMS} runs, a delta every ${PACE} ms, ${n} deltas in the steady window (${round(wallMs, 0)} ms)`,
    [
      { measure: "KB allocated / delta (sampled, collected included)", value: round(kbPerDelta, 1) },
      { measure: "process CPU µs / delta (all threads)", value: round((cpu.user + cpu.system) / n, 1) },
      { measure: "scavenges / 1,000 deltas", value: round((1000 * gc.scavenges) / n, 2) },
      {
        measure: "scavenge pause total / max ms (> 10 ms)",
        value: `${round(gc.scavengeMs, 1)} / ${round(gc.maxMs, 1)} (${gc.over10})`
      },
      { measure: "mark-compacts (ms)", value: `${gc.majors} (${round(gc.majorMs, 1)})` },
      ...top.map(([f, b]) => ({ measure: `  allocated in ${f}`, value: `${round((100 * b) / total, 1)}%` }))
    ]
  )
  await runtime.runPromise(Scope.close(scope, Exit.void))
  for (const f of followers) f.close()
  await runtime.dispose()
  rmSync(dir, { recursive: true, force: true })
  server?.close()
  server?.closeAllConnections()
  result("paced", {
    deltas: n,
    kbPerDelta: round(kbPerDelta, 2),
    cpuUsPerDelta: round((cpu.user + cpu.system) / n, 1),
    scavenges: gc.scavenges,
    scavengeMs: round(gc.scavengeMs, 1),
    scavengeMaxMs: round(gc.maxMs, 1)
  })
}
await main()
