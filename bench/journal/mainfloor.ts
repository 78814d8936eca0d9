/**
 * bench/journal/mainfloor.ts: the main thread's share of the 32-writer phase of `bench journal`
 * without the journal: the same 32 `Effect.forEach` writers awaiting one `Effect.async` each, answered
 * in one batch per `setImmediate` (the writer client's batching) — (1) with nothing else (the callers'
 * Effect machinery: the bench's own part), (2) plus the journal's per-event preparation on this thread
 * (redaction with the default rules, canonical JSON, the batch's two strings as `encodeBatch` builds
 * them, the stored events rebuilt with their seqs), and (3) plus a real worker thread answering each
 * batch's seqs without committing (the two hand-offs).
 * `node --conditions=@palyra/source --import tsx bench/journal/mainfloor.ts [perWriter] [rounds]`.
 * Prints main-thread CPU µs per append and appends/s for each; compare with `appends.ts`'
 * `mainCpuUs` / `workerCpuUs` to see what is left for the commit.
 */
import { Worker } from "node:worker_threads"
import { Canonical, Redaction } from "@palyra/core"
import { Effect } from "effect"
import { encodeBatch, type WireEvent } from "../../packages/journal/src/internal/protocol.js"
import { round } from "../lib/report.js"
import { closedLoop, event, sid } from "./events.js"

const perWriter = Number(process.argv[2] ?? 1000)
const rounds = Number(process.argv[3] ?? 3)
const redactor = Redaction.make({})
/** What the batches' two strings came to (printed, so their building is not optimized away). */
let encodedChars = 0

type Mode = "effect" | "prepare" | "handoff"

/** A stand-in writer thread: answers each batch with its first seqs (no SQLite). */
const echo = `
const { parentPort } = require("node:worker_threads")
let seq = 0
parentPort.on("message", (m) => {
  const header = JSON.parse(m.header)
  const seqs = new Float64Array(header.length)
  for (let i = 0; i < header.length; i++) seqs[i] = ++seq
  parentPort.postMessage({ id: m.id, ms: 0, seqs }, [seqs.buffer])
})`

const phase = (mode: Mode) =>
  Effect.gen(function* () {
    const worker = mode === "handoff" ? new Worker(echo, { eval: true }) : undefined
    let queued: Array<{
      sessionId: string
      events: Array<WireEvent & { body: Record<string, unknown> }>
      done: (seq: number) => void
    }> = []
    let scheduled: ReturnType<typeof setImmediate> | undefined
    const inFlight = new Map<number, typeof queued>()
    let nextId = 0
    let seq = 0
    worker?.on("message", (reply: { id: number; seqs: Float64Array }) => {
      const batch = inFlight.get(reply.id)!
      inFlight.delete(reply.id)
      for (let i = 0; i < batch.length; i++) batch[i]!.done(reply.seqs[i]!)
    })
    const flush = () => {
      scheduled = undefined
      const batch = queued
      queued = []
      if (mode === "effect") for (const p of batch) p.done(++seq)
      else {
        const { header, payloads } = encodeBatch(
          batch.map((p) => ({ op: "append", sessionId: p.sessionId, events: p.events, effects: {} }))
        )
        encodedChars += header.length + payloads.length
        if (worker === undefined) for (const p of batch) p.done(++seq)
        else {
          const id = nextId++
          inFlight.set(id, batch)
          worker.postMessage({ type: "batch", id, header, payloads })
        }
      }
    }
    const append = (sessionId: string, e: ReturnType<typeof event>) =>
      Effect.async<ReadonlyArray<unknown>>((resume) => {
        let events: Array<WireEvent & { body: Record<string, unknown> }> = []
        if (mode !== "effect") {
          const clean = redactor.redact(e) as Record<string, unknown>
          const body: Record<string, unknown> = {}
          for (const k of Object.keys(clean))
            if (k !== "_tag" && k !== "sessionId" && k !== "runId" && k !== "at") body[k] = clean[k]
          events = [{ tag: e._tag, runId: e.runId, at: e.at, payload: Canonical.canonicalJson(body), body }]
        }
        queued.push({
          sessionId,
          events,
          done: (first) =>
            resume(
              Effect.succeed(
                events.map((x, i) => ({
                  ...x.body,
                  _tag: x.tag,
                  sessionId,
                  runId: x.runId,
                  tapeSeq: first + i,
                  at: x.at
                }))
              )
            )
        })
        if (scheduled === undefined) scheduled = setImmediate(flush)
      })
    const cpu = process.threadCpuUsage()
    const start = performance.now()
    yield* closedLoop(32, perWriter, (w, i) => append(sid(w), event(sid(w), i)))
    const elapsed = performance.now() - start
    const used = process.threadCpuUsage(cpu)
    yield* Effect.promise(() => worker?.terminate() ?? Promise.resolve(0))
    return {
      mode,
      perSec: Math.round((32 * perWriter) / (elapsed / 1000)),
      mainCpuUs: round((used.user + used.system) / (32 * perWriter), 2),
      encodedChars
    }
  })

for (let r = 0; r < rounds; r++) {
  for (const mode of ["effect", "prepare", "handoff"] as const)
    console.log(JSON.stringify(await Effect.runPromise(phase(mode))))
}
