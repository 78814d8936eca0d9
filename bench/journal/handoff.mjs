/**
 * bench/journal/handoff.mjs: a preload that times the journal's hand-off to its writer thread by
 * wall clock, without touching the journal: it wraps `Worker.prototype.postMessage` and the
 * worker's `message` emit and, at exit, prints to stderr (per batch, p50/p90/p99 in µs):
 * - `post`: the `postMessage` call itself (its wall includes any time this thread sat descheduled
 *   in it — on 2 busy cores the woken writer takes this thread's core: PERF-NOTES round 16, slice W);
 * - `roundtrip`: post → the answer's `message` event on this thread;
 * - `roundtrip-commit`: the same less the writer's own commit time (`reply.ms`): both wake-ups,
 *   the batch's decode and the answer's encode;
 * - `answer→nextpost`: from the end of an answer's dispatch to the next batch's post.
 * Usage: `node --import ./bench/journal/handoff.mjs --conditions=@palyra/source --import tsx
 * bench/turn/start-reads.ts 3000 50` (or `bench/journal/appends.ts 1 1000 worker`). A worker thread
 * loads the preload too and prints empty lines (n=0).
 */
import { Worker } from "node:worker_threads"

const posts = []
const trips = []
const rest = []
const gaps = []
const sent = new Map()
let lastAnswer = 0

const post = Worker.prototype.postMessage
Worker.prototype.postMessage = function (message, transfer) {
  const t0 = performance.now()
  const result = post.call(this, message, transfer)
  if (message?.type === "batch") {
    posts.push(performance.now() - t0)
    sent.set(message.id, t0)
    if (lastAnswer > 0) gaps.push(t0 - lastAnswer)
  }
  return result
}

const emit = Worker.prototype.emit
Worker.prototype.emit = function (event, message, ...rest_) {
  if (event !== "message" || typeof message?.id !== "number" || !sent.has(message.id))
    return emit.call(this, event, message, ...rest_)
  const trip = performance.now() - sent.get(message.id)
  sent.delete(message.id)
  trips.push(trip)
  rest.push(trip - message.ms)
  const result = emit.call(this, event, message, ...rest_)
  lastAnswer = performance.now()
  return result
}

const quantile = (values, q) => {
  if (values.length === 0) return "-"
  const sorted = [...values].sort((a, b) => a - b)
  return (sorted[Math.floor(q * (sorted.length - 1))] * 1000).toFixed(0)
}
const line = (name, values) =>
  `[handoff] ${name}: n=${values.length} p50=${quantile(values, 0.5)}µs p90=${quantile(values, 0.9)}µs p99=${quantile(values, 0.99)}µs`

process.on("exit", () => {
  if (posts.length === 0) return
  console.error(
    [line("post", posts), line("roundtrip", trips), line("roundtrip-commit", rest), line("answer→nextpost", gaps)].join(
      "\n"
    )
  )
})
