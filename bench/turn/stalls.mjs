// Bench-only: when this process's event loop was held (PERF-NOTES round 16, slice T). A chain of
// 1 ms timers; a timer that fires more than `overMs` late means the loop (or the whole process:
// descheduled, a GC) did not get to it — recorded as { at: when it was due (wall clock), ms: how late,
// cpuMs: the main thread's CPU time over that stretch (`process.threadCpuUsage`, Node ≥ 23.9) — a stall
// with little CPU is the thread not running (the machine's other work), one with as much CPU is ours }.
// Costs ~1,000 timer wake-ups a second while idle: trace runs only. `stop()` ends it and gives the list.
import { performance } from "node:perf_hooks"
import { promisify } from "node:util"

export const watchStalls = (overMs = 2) => {
  const stalls = []
  const origin = performance.timeOrigin
  let timer
  const cpu = () => {
    const u = process.threadCpuUsage?.() ?? process.cpuUsage()
    return (u.user + u.system) / 1000
  }
  let due = performance.now() + 1
  let cpuAt = cpu()
  const tick = () => {
    const now = performance.now()
    const c = cpu()
    if (now - due > overMs) stalls.push({ at: origin + due, ms: now - due, cpuMs: c - cpuAt })
    due = now + 1
    cpuAt = c
    timer = setTimeout(tick, 1)
    timer.unref()
  }
  timer = setTimeout(tick, 1)
  timer.unref()
  return {
    stop: () => {
      clearTimeout(timer)
      return stalls
    }
  }
}

// Bench-only: every timer/immediate callback of this process that ran for `overMs` or more, with a
// name to find it by (the function's name, else the start of its source) — the periodic work
// (watchdogs, metrics, polls) and the Effect scheduler's own yields, which run from these timers.
// Wraps the global `setTimeout`/`setInterval`/`setImmediate` (Node's internal timers of sockets are
// not seen). Installed once, before the program loads.
export const watchTimers = (overMs = 0.5) => {
  const slow = []
  const origin = performance.timeOrigin
  const nameOf = (fn) => fn.name || String(fn).replace(/\s+/g, " ").slice(0, 120)
  const wrap = (kind, original) => {
    const wrapped = function (fn, ...rest) {
      if (typeof fn !== "function") return original.call(this, fn, ...rest)
      const timed = function (...args) {
        const start = performance.now()
        try {
          return fn.apply(this, args)
        } finally {
          const ms = performance.now() - start
          if (ms >= overMs) slow.push({ kind, at: origin + start, ms, name: nameOf(fn) })
        }
      }
      return original.call(this, timed, ...rest)
    }
    // `util.promisify(setTimeout)` etc. keep their promise forms.
    wrapped[promisify.custom] = original[promisify.custom]
    return wrapped
  }
  globalThis.setTimeout = wrap("timeout", globalThis.setTimeout)
  globalThis.setInterval = wrap("interval", globalThis.setInterval)
  globalThis.setImmediate = wrap("immediate", globalThis.setImmediate)
  return { slow }
}
