/**
 * bench/stream/attr: where a paced stream's slow events spend their time (`BENCH_STREAM_ATTR=1`).
 *
 * Server side (this process), per delivered event: its commit (the bench's stamp, when the append's
 * answer reached the main thread) and its **server write** — when the transport handed its bytes to
 * the socket (`ServerHttp2Stream#write` for gRPC, `ServerResponse#write` for SSE): the hooks below
 * keep the time and the chunk, and the chunks are decoded after the scenario (nothing is parsed on
 * the measured path). Joined with the client's receipt, an event's latency splits into
 * commit → write (the server: publication, the fan-out, the transport's encode and flush) and
 * write → receipt (the kernel, HTTP/2 flow control, the client's event loop and parsing). Also
 * the server's GC pauses (`PerformanceObserver`) overlapping the slow events, and the client's own
 * CPU and event-loop lag per scenario (reported by `client.ts` when the same variable is set).
 */
import { readdirSync, readFileSync } from "node:fs"
import { OutgoingMessage } from "node:http"
import { join } from "node:path"
import { PerformanceObserver } from "node:perf_hooks"
import { Duplex } from "node:stream"
import { percentile, round } from "../lib/report.js"
import * as Threads from "./threads.js"

const now = () => performance.timeOrigin + performance.now()
const writes: Array<{ t: number; wire: "grpc" | "sse"; chunk: Uint8Array; sent?: number }> = []
// When the event loop next reached its check phase after a write (a `setImmediate` scheduled at the
// write): Node's HTTP/2 session sends what was written from a native immediate at the start of that
// phase, so write → sent is the rest of the macrotask that wrote the frame (the main thread's work
// queued behind it), and sent → receipt the kernel, the wire and the client.
let unsent: Array<{ sent?: number }> = []
const stampSent = () => {
  const t = now()
  for (const w of unsent) w.sent = t
  unsent = []
}
const noteWrite = (w: { t: number; wire: "grpc" | "sse"; chunk: Uint8Array; sent?: number }) => {
  writes.push(w)
  if (unsent.length === 0) setImmediate(stampSent)
  unsent.push(w)
}
const gcs: Array<{ start: number; end: number }> = []
let installed = false

/** Hooks the server's socket writes and GC pauses (once). */
export const install = () => {
  if (installed) return
  installed = true
  const write = Duplex.prototype.write
  Duplex.prototype.write = function (this: Duplex, chunk: unknown, ...rest: Array<unknown>) {
    if (chunk instanceof Uint8Array && this.constructor.name === "ServerHttp2Stream")
      noteWrite({ t: now(), wire: "grpc", chunk })
    return (write as (...args: Array<unknown>) => boolean).call(this, chunk, ...rest)
  } as typeof write
  const outgoing = OutgoingMessage.prototype.write
  OutgoingMessage.prototype.write = function (this: OutgoingMessage, chunk: unknown, ...rest: Array<unknown>) {
    if (chunk instanceof Uint8Array) noteWrite({ t: now(), wire: "sse", chunk })
    return (outgoing as (...args: Array<unknown>) => boolean).call(this, chunk, ...rest)
  } as typeof outgoing
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      const start = performance.timeOrigin + e.startTime
      gcs.push({ start, end: start + e.duration })
    }
  }).observe({ entryTypes: ["gc"] })
}

// The threads' CPU and switches at the scenario's start and end (`threads.ts`).
let threadsBefore: ReturnType<typeof Threads.sample> | undefined
let threadsAfter: ReturnType<typeof Threads.sample> | undefined
/** Samples this process's threads as the scenario starts. */
export const begin = () => {
  threadsBefore = Threads.sample()
}
/** Samples them again as it ends (before anything else runs). */
export const end = () => {
  threadsAfter = Threads.sample()
}

/** The server write time of every event written since the last call, by `<sessionId>:<tapeSeq>` (first write wins). */
const writeTimes = (): Map<string, { t: number; sent: number }> => {
  const out = new Map<string, { t: number; sent: number }>()
  let w: { t: number; sent?: number } = { t: 0 }
  const set = (key: string, t: number) => {
    if (!out.has(key)) out.set(key, { t, sent: w.sent ?? t })
  }
  for (const written of writes) {
    w = written
    const chunk = written.chunk
    if (written.wire === "grpc") {
      const b = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)
      for (let p = 0; p + 5 <= b.length; ) {
        const n = b.readUInt32BE(p + 1)
        const key = eventKey(b.subarray(p + 5, p + 5 + n))
        if (key !== undefined) set(key, written.t)
        p += 5 + n
      }
    } else {
      const text = Buffer.from(chunk).toString("utf8")
      for (const m of text.matchAll(/^data: (\{.*\})$/gm)) {
        try {
          const e = JSON.parse(m[1]!) as { sessionId?: string; tapeSeq?: number }
          if (e.sessionId !== undefined && e.tapeSeq !== undefined) set(`${e.sessionId}:${e.tapeSeq}`, written.t)
        } catch {
          // a chunk boundary inside a frame (a long flood delta): not one of the paced events
        }
      }
    }
  }
  writes.length = 0
  return out
}

const varint = (b: Buffer, at: number): [number, number] => {
  let n = 0
  let f = 1
  for (;;) {
    const x = b[at++]!
    n += (x & 0x7f) * f
    f *= 0x80
    if (x < 0x80) return [n, at]
  }
}
/** A `RunStreamResponse`'s event as `<sessionId>:<tapeSeq>` (field 1 → TapeEvent fields 1 and 3), read by hand. */
const eventKey = (m: Buffer): string | undefined => {
  if (m[0] !== 0x0a) return undefined
  const [len, start] = varint(m, 1)
  let session = ""
  let seq = 0
  for (let p = start; p < start + len; ) {
    const [tag, q] = varint(m, p)
    const kind = tag & 7
    if (kind === 0) {
      const [v, r] = varint(m, q)
      if (tag >>> 3 === 3) seq = v
      p = r
    } else if (kind === 2) {
      const [l, r] = varint(m, q)
      if (tag >>> 3 === 1) session = m.toString("utf8", r, r + l)
      p = r + l
    } else return undefined
  }
  return `${session}:${seq}`
}

/**
 * The writer's commits and idle checkpoints in [from, to] from `PALYRA_JOURNAL_TRACE`'s files (the
 * journal's opt-in trace, round 12), as [start, end] on the epoch clock; `undefined` when unset.
 */
const writerSpans = (from: number, to: number) => {
  const dir = process.env.PALYRA_JOURNAL_TRACE
  if (dir === undefined || dir === "") return undefined
  const commits: Array<readonly [number, number]> = []
  const checkpoints: Array<readonly [number, number]> = []
  for (const f of readdirSync(dir).filter((n) => n.startsWith("journal.") && n.endsWith(".jsonl")))
    for (const l of readFileSync(join(dir, f), "utf8").split("\n")) {
      if (l === "") continue
      const e = JSON.parse(l) as { kind: string; at: number; ms?: number; copyMs?: number; totalMs?: number }
      const ms = e.ms ?? e.totalMs ?? e.copyMs ?? 0
      if (e.at + ms < from || e.at > to) continue
      ;(e.kind === "commit" ? commits : checkpoints).push([e.at, e.at + ms])
    }
  return { commits, checkpoints }
}

/** What the client process reports about itself per scenario. */
export interface ClientSelf {
  readonly cpuUsPerEvent: number
  readonly cpuShare: number
  readonly loopP99Ms: number
  readonly loopMaxMs: number
  /** Its event loop's stalls over 2 ms and its GC pauses, [start, end] on the epoch clock. */
  readonly stalls: ReadonlyArray<readonly [number, number]>
  readonly gcs: ReadonlyArray<readonly [number, number]>
}

/**
 * The attribution of one scenario: legs at p50/p99 over all events and the share of the slowest 1%
 * whose dominant leg is each one; GC overlap. Prints one line; call after the scenario ended.
 */
export const report = (
  label: string,
  receipts: ReadonlyArray<[string, number]>,
  committedOf: (key: string) => number | undefined,
  client: ClientSelf | undefined,
  lastStartAt: number
) => {
  const written = writeTimes()
  const rows: Array<{
    total: number
    server: number
    wire: number
    committed: number
    received: number
    seq: number
    /** write → the next check phase (the rest of the writing macrotask). */
    unsent: number
  }> = []
  for (const [key, received] of receipts) {
    const committed = committedOf(key)
    const w = written.get(key)
    if (committed === undefined || w === undefined) continue
    const seq = Number(key.slice(key.lastIndexOf(":") + 1))
    rows.push({
      total: received - committed,
      server: w.t - committed,
      wire: received - w.t,
      committed,
      received,
      seq,
      unsent: w.sent - w.t
    })
  }
  const pct = (xs: Array<number>, p: number) =>
    round(
      percentile(
        xs.sort((a, b) => a - b),
        p
      ),
      2
    )
  const totals = rows.map((r) => r.total)
  const p99 = percentile(
    [...totals].sort((a, b) => a - b),
    99
  )
  const slow = rows.filter((r) => r.total >= p99)
  const gcOverlap = slow.filter((r) => gcs.some((g) => g.end > r.committed && g.start < r.received)).length
  const writer = writerSpans(Math.min(...rows.map((r) => r.committed)), Math.max(...rows.map((r) => r.received)))
  const overlaps = (spans: ReadonlyArray<readonly [number, number]>, minMs: number) =>
    slow.filter((r) => spans.some(([a, b]) => b - a > minMs && b > r.committed && a < r.received)).length
  const serverDominant = slow.filter((r) => r.server > r.wire).length
  const line = {
    attr: label,
    events: rows.length,
    p50: pct(totals, 50),
    p99: round(p99, 2),
    "commit→write p50/p99": `${pct(
      rows.map((r) => r.server),
      50
    )}/${pct(
      rows.map((r) => r.server),
      99
    )}`,
    "write→receipt p50/p99": `${pct(
      rows.map((r) => r.wire),
      50
    )}/${pct(
      rows.map((r) => r.wire),
      99
    )}`,
    "slowest 1%: server leg / wire+client leg dominant": `${serverDominant}/${slow.length - serverDominant}`,
    "slowest 1%: mean server / wire ms": `${round(mean(slow.map((r) => r.server)), 2)}/${round(mean(slow.map((r) => r.wire)), 2)}`,
    "slowest 1% overlapping a server GC": `${gcOverlap}/${slow.length}`,
    "write→check phase p50/p99; slowest 1% mean ms": `${pct(
      rows.map((r) => r.unsent),
      50
    )}/${pct(
      rows.map((r) => r.unsent),
      99
    )}; ${round(mean(slow.map((r) => r.unsent)), 2)}`,
    ...(writer === undefined
      ? {}
      : {
          "writer commits: count, p99 ms": `${writer.commits.length}, ${pct(
            writer.commits.map(([a, b]) => b - a),
            99
          )}`,
          "slowest 1% overlapping a writer commit > 1 ms / an idle checkpoint": `${overlaps(writer.commits, 1)}/${overlaps(writer.checkpoints, 0)}`
        }),
    ...(threadsBefore === undefined || threadsAfter === undefined
      ? {}
      : { "server threads per event": Threads.perEvent(threadsBefore, threadsAfter, receipts.length) }),
    // Which events of their session the slowest are: the run's start commit (the first few seqs of
    // a fresh session) or its later deltas.
    "slowest 1% by tapeSeq (min/median/max)": (() => {
      const seqs = slow.map((r) => r.seq).sort((a, b) => a - b)
      return seqs.length === 0 ? "" : `${seqs[0]}/${seqs[Math.floor(seqs.length / 2)]}/${seqs.at(-1)}`
    })(),
    "slowest 1% committed in the start burst": `${slow.filter((r) => r.committed <= lastStartAt).length}/${slow.length}`,
    ...(client === undefined
      ? {}
      : {
          "slowest 1% whose wire leg overlaps a client stall > 2 ms / a client GC": `${
            slow.filter((r) => client.stalls.some(([a, b]) => b > r.received - r.wire && a < r.received)).length
          }/${slow.filter((r) => client.gcs.some(([a, b]) => b > r.received - r.wire && a < r.received)).length}`,
          "client stalls > 2 ms: count, total ms": `${client.stalls.length}, ${round(
            client.stalls.reduce((a, [x, y]) => a + y - x, 0),
            1
          )}`,
          "client GC total ms": round(
            client.gcs.reduce((a, [x, y]) => a + y - x, 0),
            1
          ),
          "client CPU µs/event": round(client.cpuUsPerEvent, 1),
          "client CPU share of wall": round(client.cpuShare, 2),
          "client loop lag p99/max ms": `${round(client.loopP99Ms, 1)}/${round(client.loopMaxMs, 1)}`
        })
  }
  gcs.length = 0
  console.log(JSON.stringify(line))
}

const mean = (xs: ReadonlyArray<number>) => (xs.length === 0 ? 0 : xs.reduce((a, b) => a + b, 0) / xs.length)
