/**
 * bench/stream/threads: this process's CPU and context switches per thread (`BENCH_STREAM_ATTR=1`),
 * read from `/proc/self/task/<tid>/{stat,status}` (Linux). Grouped by the thread's name: `main` is
 * the main thread, `WorkerThread` the journal's writer (this bench's only worker thread),
 * `libuv-worker` the thread pool, `V8Worker` V8's helpers (parallel scavenges, concurrent marking
 * and sweeping, background compilation).
 * A scenario's delta says which thread spent the CPU, and how often a thread was preempted
 * (`nonvoluntary_ctxt_switches`: it wanted to run on, the kernel gave its core to another thread).
 */
import { readdirSync, readFileSync } from "node:fs"

interface ThreadSample {
  readonly name: string
  readonly cpuMs: number
  readonly voluntary: number
  readonly preempted: number
}

// USER_HZ: 100 on every Linux Node supports (sysconf(_SC_CLK_TCK)).
const TICK_MS = 10

/** Every thread of this process now, by thread id; empty where `/proc` is not there. */
export const sample = (): Map<string, ThreadSample> => {
  const out = new Map<string, ThreadSample>()
  let tids: Array<string> = []
  try {
    tids = readdirSync("/proc/self/task")
  } catch {
    return out
  }
  for (const tid of tids) {
    try {
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, "utf8")
      const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"))
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
      const status = readFileSync(`/proc/self/task/${tid}/status`, "utf8")
      const num = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+)`, "m").exec(status)?.[1] ?? 0)
      out.set(tid, {
        name: tid === String(process.pid) ? "main" : name,
        cpuMs: (Number(fields[11]) + Number(fields[12])) * TICK_MS,
        voluntary: num("voluntary_ctxt_switches"),
        preempted: num("nonvoluntary_ctxt_switches")
      })
    } catch {
      // the thread ended meanwhile
    }
  }
  return out
}

/** What each thread did between two samples, per event: CPU µs and switches, by thread name. */
export const perEvent = (before: Map<string, ThreadSample>, after: Map<string, ThreadSample>, events: number) => {
  const rows: Array<{ name: string; cpuMs: number; voluntary: number; preempted: number }> = []
  for (const [tid, a] of after) {
    const b = before.get(tid)
    rows.push({
      name: a.name,
      cpuMs: a.cpuMs - (b?.cpuMs ?? 0),
      voluntary: a.voluntary - (b?.voluntary ?? 0),
      preempted: a.preempted - (b?.preempted ?? 0)
    })
  }
  const by = new Map<string, { cpuMs: number; voluntary: number; preempted: number }>()
  for (const r of rows) {
    const g = by.get(r.name) ?? { cpuMs: 0, voluntary: 0, preempted: 0 }
    g.cpuMs += r.cpuMs
    g.voluntary += r.voluntary
    g.preempted += r.preempted
    by.set(r.name, g)
  }
  const out: Record<string, string> = {}
  for (const [name, g] of [...by].sort((x, y) => y[1].cpuMs - x[1].cpuMs))
    if (g.cpuMs > 0 || g.preempted > 0)
      out[name] =
        `${((g.cpuMs * 1000) / events).toFixed(1)} µs, switches ${(g.voluntary / events).toFixed(2)}+${(g.preempted / events).toFixed(2)} preempted`
  return out
}
