/**
 * bench/journal: the SQLite journal's append throughput and latency (hash chain + redaction on),
 * the raw better-sqlite3 ceiling for the same rows, the event-loop delay while 32 writers append,
 * bytes on disk as a conversation grows, and LangGraph.js persisting the same tool-using
 * conversation with its SQLite checkpointer. Everything runs in this one process, on this machine.
 * The 32-writer phase runs twice: with the journal's default writer (a worker thread) and inline.
 * Both run interleaved with the raw ceiling, in rounds of equal segments (section 2a): `ratioToRaw`
 * is the median of the rounds' ratios, `ratioToRawMin`/`Max` their spread.
 */

import { mkdtempSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { Worker } from "node:worker_threads"
import { AIMessage, type BaseMessage, HumanMessage, ToolMessage } from "@langchain/core/messages"
import { END, MessagesAnnotation, START, StateGraph } from "@langchain/langgraph"
import { SqliteSaver } from "@langchain/langgraph-checkpoint-sqlite"
import { Caller, Gateway, type Journal, Records, ScriptedModel, Tool } from "@palyra/core"
import { collect, gatewayLayer } from "@palyra/core/testing"
import { SqliteJournal } from "@palyra/journal"
import Database from "better-sqlite3"
import { Effect, type Layer, ManagedRuntime, Schema } from "effect"
import { loopProbe, percentile, quick, result, round, table } from "../lib/report.js"
import { closedLoop, event, OUTPUT, sid } from "./events.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-bench-journal-"))

const fileBytes = (filename: string) => {
  const db = new Database(filename)
  db.pragma("wal_checkpoint(TRUNCATE)")
  db.close()
  return ["", "-wal", "-shm"].reduce((n, s) => {
    try {
      return n + statSync(filename + s).size
    } catch {
      return n
    }
  }, 0)
}

const session = (id: string) => Records.makeSession({ id: id as never, principal: "bench" })

// ---- 1. appends: a single writer (the 32-writer phases run interleaved with the ceiling, 2a) ---
const appendPhase = async (writers: number, perWriter: number, writer?: SqliteJournal.WriterMode) => {
  const filename = join(dir, `appends-${writers}-${writer ?? "default"}.db`)
  const latencies: Array<number> = []
  let probe: ReturnType<typeof loopProbe> | undefined
  // The main thread's busy time (event-loop utilization), not the process's: the worker's commits
  // run on another thread.
  let elu = performance.eventLoopUtilization()
  // The main thread's CPU (not counting time it was descheduled, which utilization does count).
  let mainCpu = process.threadCpuUsage()
  const program = Effect.gen(function* () {
    const j = yield* SqliteJournal.make({ filename, writer })
    for (let w = 0; w < writers; w++) yield* j.createSession(session(sid(w)))
    // warm-up
    yield* Effect.forEach(Array.from({ length: 50 }), (_, i) => j.append(sid(0) as never, [event(sid(0), i)]))
    probe = loopProbe()
    elu = performance.eventLoopUtilization()
    mainCpu = process.threadCpuUsage()
    const start = performance.now()
    yield* Effect.forEach(
      Array.from({ length: writers }, (_, w) => w),
      (w) =>
        Effect.forEach(
          Array.from({ length: perWriter }, (_, i) => i),
          (i) =>
            Effect.suspend(() => {
              const t = performance.now()
              return Effect.tap(j.append(sid(w) as never, [event(sid(w), i)]), () =>
                Effect.sync(() => latencies.push(performance.now() - t))
              )
            }),
          { discard: true }
        ),
      { concurrency: "unbounded", discard: true }
    )
    const elapsed = performance.now() - start
    elu = performance.eventLoopUtilization(elu)
    mainCpu = process.threadCpuUsage(mainCpu)
    const verify = yield* j.verify
    if (!verify.ok) throw new Error("chain broken in bench")
    return elapsed
  })
  const elapsed = await Effect.runPromise(Effect.scoped(program))
  const loop = probe!.stop()
  latencies.sort((a, b) => a - b)
  return {
    perSec: (writers * perWriter) / (elapsed / 1000),
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    loopP50: loop.p50,
    loopP99: loop.p99,
    loopMax: loop.max,
    mainUsPerAppend: (elu.active * 1000) / (writers * perWriter),
    mainCpuUsPerAppend: (mainCpu.user + mainCpu.system) / (writers * perWriter)
  }
}

// ---- 2. the raw ceiling: plain prepared inserts, one transaction per batch of 32 --------------
/**
 * A raw table for the ceiling: the tape's columns and its one unique index, no hash, no redaction.
 * `segment(rows)` inserts the next `rows` rows (one transaction per 32) and returns its rows/s; the
 * table keeps growing, so segment k of the ceiling runs against the same table size as segment k of
 * the journal's phases it is interleaved with.
 */
const rawTable = (filename: string) => {
  const db = new Database(filename)
  db.pragma("journal_mode = WAL")
  db.pragma("synchronous = NORMAL")
  db.exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, tape_seq INTEGER NOT NULL,
    run_id TEXT, kind TEXT NOT NULL, created_at INTEGER NOT NULL, payload TEXT NOT NULL, prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL, UNIQUE (session_id, tape_seq))`)
  const insert = db.prepare(
    "INSERT INTO t (session_id, tape_seq, run_id, kind, created_at, payload, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
  )
  const payload = JSON.stringify(event(sid(0), 0))
  const hash = "f".repeat(64)
  const batch = db.transaction((from: number) => {
    for (let i = from; i < from + 32; i++)
      insert.run(sid(i % 32), i, null, "ToolResult", Date.now(), payload, hash, hash)
  })
  let next = 0
  return {
    /** Rows/s, and the CPU µs per row (this thread's: the ceiling runs on it). */
    segment: (rows: number) => {
      const cpu = process.threadCpuUsage()
      const start = performance.now()
      for (const end = next + rows; next < end; next += 32) batch(next)
      const elapsed = performance.now() - start
      const used = process.threadCpuUsage(cpu)
      return { perSec: rows / (elapsed / 1000), cpuUs: (used.user + used.system) / rows }
    },
    close: () => db.close()
  }
}

// ---- 2a. the 32-writer phases interleaved with the raw ceiling --------------------------------
// The ratio to raw is a ratio of two throughputs on a shared, noisy machine: measured at different
// moments (as until round 15) the ceiling alone swung 44–80 K rows/s between runs. Here one round
// runs a segment of each (the raw ceiling, the worker writer, the inline writer: the same number of
// rows, every table the same size at the round's start), the order rotating per round; each round
// gives its own ratios and `ratioToRaw` is their median.
const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2
}

/**
 * One journal's 32 concurrent writers, run in segments; the loop probe and CPU counted in segments only.
 * A segment's CPU is the main thread's plus the writer thread's (`Worker.cpuUsage`; none inline).
 */
const journalWriters = (writer: SqliteJournal.WriterMode | undefined) =>
  Effect.gen(function* () {
    const filename = join(dir, `appends-32-${writer ?? "default"}.db`)
    let thread: Worker | undefined
    const j = yield* SqliteJournal.make({
      filename,
      writer,
      onWorker: (w) => {
        thread = w
      }
    })
    // The worker is unref'd while idle and the answer to `cpuUsage` does not hold the process open:
    // a timer does, until it answers.
    const threadCpu = Effect.promise(async () => {
      if (thread === undefined) return 0
      const keepAlive = setInterval(() => {}, 1000)
      const used = await thread.cpuUsage().finally(() => clearInterval(keepAlive))
      return used.user + used.system
    })
    for (let w = 0; w < 32; w++) yield* j.createSession(session(sid(w)))
    yield* Effect.forEach(Array.from({ length: 50 }), (_, i) => j.append(sid(0) as never, [event(sid(0), i)]))
    const latencies: Array<number> = []
    const delays: Array<number> = []
    let appends = 0
    let active = 0
    let cpu = 0
    let writerCpu = 0
    const segment = (perWriter: number, measured: boolean) =>
      Effect.gen(function* () {
        const writerBefore = yield* threadCpu
        // The event-loop probe of `loopProbe`, run only while this segment runs (a raw segment
        // blocks the thread by design: it is not the journal's delay).
        let last = performance.now()
        const timer = setInterval(() => {
          const now = performance.now()
          if (measured) delays.push(Math.max(0, now - last - 1))
          last = now
        }, 1)
        const elu = performance.eventLoopUtilization()
        const mainCpu = process.threadCpuUsage()
        const start = performance.now()
        yield* closedLoop(32, perWriter, (w, i) =>
          Effect.suspend(() => {
            const t = performance.now()
            return Effect.tap(j.append(sid(w) as never, [event(sid(w), i)]), () =>
              Effect.sync(() => {
                if (measured) latencies.push(performance.now() - t)
              })
            )
          })
        )
        const elapsed = performance.now() - start
        clearInterval(timer)
        const gap = Math.max(0, performance.now() - last - 1)
        const used = process.threadCpuUsage(mainCpu)
        const busy = performance.eventLoopUtilization(elu).active
        const writerUsed = (yield* threadCpu) - writerBefore
        if (measured) {
          delays.push(gap)
          active += busy
          cpu += used.user + used.system
          writerCpu += writerUsed
          appends += 32 * perWriter
        }
        return {
          perSec: (32 * perWriter) / (elapsed / 1000),
          cpuUs: (used.user + used.system + writerUsed) / (32 * perWriter)
        }
      })
    const summary = Effect.gen(function* () {
      const verify = yield* j.verify
      if (!verify.ok) throw new Error("chain broken in bench")
      latencies.sort((a, b) => a - b)
      delays.sort((a, b) => a - b)
      return {
        p50: percentile(latencies, 50),
        p99: percentile(latencies, 99),
        loopP50: percentile(delays, 50),
        loopP99: percentile(delays, 99),
        loopMax: delays.at(-1) ?? 0,
        mainUsPerAppend: (active * 1000) / appends,
        mainCpuUsPerAppend: cpu / appends,
        writerCpuUsPerAppend: writerCpu / appends
      }
    })
    return { segment, summary }
  })

const interleaved = (rounds: number, perWriter: number) =>
  Effect.scoped(
    Effect.gen(function* () {
      const raw = rawTable(join(dir, "raw.db"))
      yield* Effect.addFinalizer(() => Effect.sync(raw.close))
      const worker = yield* journalWriters(undefined)
      const inline = yield* journalWriters("inline")
      // warm-up: a segment of each, not counted
      raw.segment(32 * perWriter)
      yield* worker.segment(perWriter, false)
      yield* inline.segment(perWriter, false)
      const sides = ["raw", "worker", "inline"] as const
      const rows: Array<Record<(typeof sides)[number], { perSec: number; cpuUs: number }>> = []
      for (let r = 0; r < rounds; r++) {
        const none = { perSec: 0, cpuUs: 0 }
        const row = { raw: none, worker: none, inline: none }
        for (let k = 0; k < sides.length; k++) {
          const side = sides[(r + k) % sides.length]!
          row[side] =
            side === "raw"
              ? raw.segment(32 * perWriter)
              : yield* (side === "worker" ? worker : inline).segment(perWriter, true)
        }
        rows.push(row)
      }
      return { rows, many: yield* worker.summary, manyInline: yield* inline.summary }
    })
  )

// ---- 2b. where should the single writer live? The same batched inserts (32 writers, each awaiting
// its acknowledgement, batched per event-loop turn) on the main thread vs in a worker thread.
const writerPlacement = async (placement: "main" | "worker", perWriter: number) => {
  const filename = join(dir, `placement-${placement}.db`)
  const payload = JSON.stringify(event(sid(0), 0))
  const hash = "f".repeat(64)
  let pending: Array<{ row: Array<unknown>; done: () => void }> = []
  let scheduled = false
  let flush: (batch: typeof pending) => Promise<void>
  let close = async () => {}
  if (placement === "main") {
    const db = new Database(filename)
    db.pragma("journal_mode = WAL")
    db.pragma("synchronous = NORMAL")
    db.exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, tape_seq INTEGER NOT NULL,
      kind TEXT NOT NULL, created_at INTEGER NOT NULL, payload TEXT NOT NULL, hash TEXT NOT NULL, UNIQUE (session_id, tape_seq))`)
    const insert = db.prepare(
      "INSERT INTO t (session_id, tape_seq, kind, created_at, payload, hash) VALUES (?, ?, ?, ?, ?, ?)"
    )
    const commit = db.transaction((rows: Array<Array<unknown>>) => {
      for (const r of rows) insert.run(...r)
    })
    flush = async (batch) => {
      commit(batch.map((p) => p.row))
      for (const p of batch) p.done()
    }
    close = async () => {
      db.close()
    }
  } else {
    const { Worker } = await import("node:worker_threads")
    const worker = new Worker(new URL("./worker-writer.mjs", import.meta.url), { workerData: { filename } })
    const waiting = new Map<number, () => void>()
    let nextId = 0
    worker.on("message", (m: { id: number }) => {
      waiting.get(m.id)?.()
      waiting.delete(m.id)
    })
    flush = (batch) =>
      new Promise<void>((resolve) => {
        const id = nextId++
        waiting.set(id, () => {
          for (const p of batch) p.done()
          resolve()
        })
        worker.postMessage({ id, rows: batch.map((p) => p.row) })
      })
    close = async () => {
      await worker.terminate()
    }
  }
  const write = (row: Array<unknown>) =>
    new Promise<void>((done) => {
      pending.push({ row, done })
      if (!scheduled) {
        scheduled = true
        setImmediate(() => {
          scheduled = false
          const batch = pending
          pending = []
          void flush(batch)
        })
      }
    })
  const probe = loopProbe()
  const start = performance.now()
  await Promise.all(
    Array.from({ length: 32 }, async (_, w) => {
      for (let i = 1; i <= perWriter; i++) await write([sid(w), i, "ToolResult", Date.now(), payload, hash])
    })
  )
  const elapsed = performance.now() - start
  const loop = probe.stop()
  await close()
  return { perSec: (32 * perWriter) / (elapsed / 1000), loopP99: loop.p99, loopMax: loop.max }
}

// ---- 3. the same 200-turn tool-using conversation: ours vs LangGraph -------------------------
const listFiles = Tool.make("fs.list", {
  description: "List files",
  parameters: Schema.Struct({ dir: Schema.String }),
  risk: "low",
  execute: () => Effect.succeed(OUTPUT)
})
const conversationModel = () =>
  ScriptedModel.make((request) =>
    request.messages.at(-1)?.role === "tool"
      ? { text: ["There are 12 entries ", "in that folder."], usage: { inputTokens: 120, outputTokens: 12 } }
      : { toolCalls: [{ name: "fs.list", args: { dir: "." } }], usage: { inputTokens: 100, outputTokens: 8 } }
  )

const oursConversation = async (turns: number, checkpoints: ReadonlyArray<number> = []) => {
  const filename = join(dir, `conversation-${turns}.db`)
  const runtime = ManagedRuntime.make(
    gatewayLayer({
      model: conversationModel(),
      tools: [listFiles],
      journal: SqliteJournal.layer({ filename })
    }) as Layer.Layer<Gateway.Gateway | Journal.Journal>
  )
  const sizes = new Map<number, number>()
  let events = 0
  await runtime.runPromise(Effect.void) // opens and migrates the journal
  const baseline = fileBytes(filename) // an empty journal: schema only
  const start = performance.now()
  for (let t = 1; t <= turns; t++) {
    const seen = await runtime.runPromise(
      Effect.flatMap(Gateway.Gateway, (g) =>
        Effect.flatMap(
          g.startRun(Caller.user("bench"), { key: "conversation", text: `List the files, turn ${t}` }),
          (r) => collect(r.events)
        )
      )
    )
    events += seen.length
    if (checkpoints.includes(t)) sizes.set(t, (fileBytes(filename) - baseline) / events)
  }
  const elapsed = performance.now() - start
  await runtime.dispose()
  return { ms: elapsed, bytes: fileBytes(filename), events, sizes }
}

const langGraphConversation = async (turns: number) => {
  const filename = join(dir, `langgraph-${turns}.db`)
  const saver = SqliteSaver.fromConnString(filename)
  const agent = (state: { messages: Array<BaseMessage> }) => {
    const last = state.messages.at(-1)
    if (last instanceof ToolMessage) return { messages: [new AIMessage("There are 12 entries in that folder.")] }
    const id = `call_${state.messages.length}`
    return {
      messages: [new AIMessage({ content: "", tool_calls: [{ id, name: "fs_list", args: { dir: "." } }] })]
    }
  }
  const tools = (state: { messages: Array<BaseMessage> }) => {
    const call = (state.messages.at(-1) as AIMessage).tool_calls![0]!
    return { messages: [new ToolMessage({ content: OUTPUT, tool_call_id: call.id! })] }
  }
  const graph = new StateGraph(MessagesAnnotation)
    .addNode("agent", agent)
    .addNode("tools", tools)
    .addEdge(START, "agent")
    .addConditionalEdges("agent", (s) => ((s.messages.at(-1) as AIMessage).tool_calls?.length ? "tools" : END))
    .addEdge("tools", "agent")
    .compile({ checkpointer: saver })
  const config = { configurable: { thread_id: "conversation" } }
  const start = performance.now()
  for (let t = 1; t <= turns; t++) {
    await graph.invoke({ messages: [new HumanMessage(`List the files, turn ${t}`)] }, config)
  }
  const elapsed = performance.now() - start
  ;(saver as unknown as { db: Database.Database }).db.close()
  return { ms: elapsed, bytes: fileBytes(filename) }
}

const main = async () => {
  const single = await appendPhase(1, quick ? 500 : 5000)
  const { rows: pairs, many, manyInline } = await Effect.runPromise(interleaved(quick ? 5 : 7, quick ? 40 : 300))
  const ratios = pairs.map((p) => p.worker.perSec / p.raw.perSec)
  const ratiosInline = pairs.map((p) => p.inline.perSec / p.raw.perSec)
  // The same ratio in CPU: the ceiling's CPU per row ÷ the journal's (both of its threads) per
  // append — what the ratio would be with the threads' wake-ups free and a core to spare.
  const ratiosCpu = pairs.map((p) => p.raw.cpuUs / p.worker.cpuUs)
  const rawPerSec = median(pairs.map((p) => p.raw.perSec))
  const manyPerSec = median(pairs.map((p) => p.worker.perSec))
  const manyInlinePerSec = median(pairs.map((p) => p.inline.perSec))
  table("the 32-writer phases interleaved with the raw ceiling (equal segments, order rotating per round)", [
    ...pairs.map((p, r) => ({
      round: r + 1,
      "raw rows/s": Math.round(p.raw.perSec),
      "worker events/s": Math.round(p.worker.perSec),
      "worker ÷ raw": round(ratios[r]!, 3),
      "inline events/s": Math.round(p.inline.perSec),
      "inline ÷ raw": round(ratiosInline[r]!, 3),
      "raw CPU µs/row": round(p.raw.cpuUs, 1),
      "worker CPU µs/append": round(p.worker.cpuUs, 1),
      "CPU ratio": round(ratiosCpu[r]!, 3)
    })),
    {
      round: "median",
      "raw rows/s": Math.round(rawPerSec),
      "worker events/s": Math.round(manyPerSec),
      "worker ÷ raw": round(median(ratios), 3),
      "inline events/s": Math.round(manyInlinePerSec),
      "inline ÷ raw": round(median(ratiosInline), 3),
      "raw CPU µs/row": round(median(pairs.map((p) => p.raw.cpuUs)), 1),
      "worker CPU µs/append": round(median(pairs.map((p) => p.worker.cpuUs)), 1),
      "CPU ratio": round(median(ratiosCpu), 3)
    }
  ])
  // The rounds disagree by more than ±15% of their median: the machine (often the raw ceiling's own
  // checkpoint fsyncs, which the journal keeps off its commits) moved the wall ratio this run.
  const [low, high] = [Math.min(...ratios), Math.max(...ratios)]
  if (low < median(ratios) * 0.85 || high > median(ratios) * 1.15)
    console.log(
      `note: the rounds' worker ÷ raw spread ${round(low, 3)}–${round(high, 3)}: the wall ratio is load-bound this run (CPU ratio ${round(median(ratiosCpu), 3)}; tick-sampled CPU clocks make it noisy in --quick's short segments)`
    )
  const onMain = await writerPlacement("main", quick ? 100 : 1000)
  const inWorker = await writerPlacement("worker", quick ? 100 : 1000)
  table("appends (hash chain + redaction on, synchronous=NORMAL, WAL)", [
    {
      writers: 1,
      "events/s": Math.round(single.perSec),
      "p50 ms": round(single.p50, 3),
      "p99 ms": round(single.p99, 3),
      "loop p99 ms": round(single.loopP99, 2),
      "main µs/append": round(single.mainUsPerAppend, 1),
      "main CPU µs/append": round(single.mainCpuUsPerAppend, 1)
    },
    {
      writers: 32,
      "events/s": Math.round(manyPerSec),
      "p50 ms": round(many.p50, 3),
      "p99 ms": round(many.p99, 3),
      "loop p99 ms": round(many.loopP99, 2),
      "main µs/append": round(many.mainUsPerAppend, 1),
      "main CPU µs/append": round(many.mainCpuUsPerAppend, 1)
    },
    {
      writers: "32, inline writer",
      "events/s": Math.round(manyInlinePerSec),
      "p50 ms": round(manyInline.p50, 3),
      "p99 ms": round(manyInline.p99, 3),
      "loop p99 ms": round(manyInline.loopP99, 2),
      "main µs/append": round(manyInline.mainUsPerAppend, 1),
      "main CPU µs/append": round(manyInline.mainCpuUsPerAppend, 1)
    },
    {
      writers: "raw ceiling",
      "events/s": Math.round(rawPerSec),
      "p50 ms": "-",
      "p99 ms": "-",
      "loop p99 ms": "-",
      "main µs/append": "-",
      "main CPU µs/append": "-"
    }
  ])
  console.log(
    `event-loop delay while 32 writers append: p50 ${round(many.loopP50, 2)} ms, p99 ${round(many.loopP99, 2)} ms, max ${round(many.loopMax, 2)} ms`
  )
  table("where the single writer lives (same batched inserts, 32 awaiting writers)", [
    {
      writer: "main thread",
      "events/s": Math.round(onMain.perSec),
      "loop p99 ms": round(onMain.loopP99, 2),
      "loop max ms": round(onMain.loopMax, 2)
    },
    {
      writer: "worker thread",
      "events/s": Math.round(inWorker.perSec),
      "loop p99 ms": round(inWorker.loopP99, 2),
      "loop max ms": round(inWorker.loopMax, 2)
    }
  ])

  const turns = quick ? 20 : 200
  const ours = await oursConversation(turns)
  const lg = await langGraphConversation(turns)
  table(`the same ${turns}-turn tool-using conversation, persisted`, [
    { system: "Palyra (Gateway + SQLite journal)", "wall ms": Math.round(ours.ms), "bytes on disk": ours.bytes },
    { system: "LangGraph.js + SqliteSaver", "wall ms": Math.round(lg.ms), "bytes on disk": lg.bytes }
  ])

  const small = quick ? 10 : 100
  const large = quick ? 200 : 2000
  const growth = await oursConversation(large, [small, large])
  const at100 = growth.sizes.get(small)!
  const at2000 = growth.sizes.get(large)!
  table("bytes on disk per event as the conversation grows", [
    { turns: small, "bytes/event": Math.round(at100) },
    { turns: large, "bytes/event": Math.round(at2000) }
  ])
  rmSync(dir, { recursive: true, force: true })
  result("journal", {
    appendsPerSec: Math.round(manyPerSec),
    rawPerSec: Math.round(rawPerSec),
    ratioToRaw: round(median(ratios), 3),
    ratioToRawMin: round(Math.min(...ratios), 3),
    ratioToRawMax: round(Math.max(...ratios), 3),
    p50AppendMs: round(many.p50, 3),
    p99AppendMs: round(many.p99, 3),
    eventLoopP99Ms: round(many.loopP99, 2),
    mainUsPerAppend: round(many.mainUsPerAppend, 1),
    mainCpuUsPerAppend: round(many.mainCpuUsPerAppend, 1),
    writerCpuUsPerAppend: round(many.writerCpuUsPerAppend, 1),
    rawCpuUsPerRow: round(median(pairs.map((p) => p.raw.cpuUs)), 2),
    ratioToRawCpu: round(median(ratiosCpu), 3),
    appendsPerSecInline: Math.round(manyInlinePerSec),
    ratioToRawInline: round(median(ratiosInline), 3),
    ratioToRawInlineMin: round(Math.min(...ratiosInline), 3),
    ratioToRawInlineMax: round(Math.max(...ratiosInline), 3),
    eventLoopP99MsInline: round(manyInline.loopP99, 2),
    mainUsPerAppendInline: round(manyInline.mainUsPerAppend, 1),
    mainCpuUsPerAppendInline: round(manyInline.mainCpuUsPerAppend, 1),
    oursMs: Math.round(ours.ms),
    langGraphMs: Math.round(lg.ms),
    oursBytes: ours.bytes,
    langGraphBytes: lg.bytes,
    bytesPerEventAt100: Math.round(at100),
    bytesPerEventAt2000: Math.round(at2000)
  })
}

await main()
