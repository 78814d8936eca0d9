/**
 * bench/journal/roundtrip.ts: where the worker writer's wall time goes in the 32-writer phase of
 * `bench journal` (32 sessions, one append at a time each): every batch's post and answer on this
 * thread, timed by wrapping the writer `Worker`'s `postMessage` and `message` listener (the
 * journal's code is not changed), and the commit time the worker reports with each answer:
 * `node --conditions=@palyra/source --import tsx bench/journal/roundtrip.ts [perWriter] [rounds]`.
 * Prints per round: events/s, CPU µs per append (main thread, process), batch sizes, and per round
 * trip the time from the post to the answer, the worker's commit within it (the rest is the two
 * hand-offs), the time from the answer to the next post (this thread's work on the batch's
 * callers), and the commit time's distribution (the slow ones are WAL checkpoints).
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Worker } from "node:worker_threads"
import { Records } from "@palyra/core"
import { SqliteJournal } from "@palyra/journal"
import { Effect } from "effect"
import { percentile, round } from "../lib/report.js"
import { closedLoop, event, sid } from "./events.js"

const perWriter = Number(process.argv[2] ?? 600)
const rounds = Number(process.argv[3] ?? 3)
const dir = mkdtempSync(join(tmpdir(), "palyra-bench-roundtrip-"))

const posts: Array<{ at: number; ops: number }> = []
const answers: Array<{ at: number; commitMs: number }> = []
const post = Worker.prototype.postMessage
Worker.prototype.postMessage = function (this: Worker, message: unknown, transfer?: never) {
  const m = message as { type?: string; header?: string }
  if (m.type === "batch") posts.push({ at: performance.now(), ops: (JSON.parse(m.header!) as Array<unknown>).length })
  return post.call(this, message, transfer)
}
const on = Worker.prototype.on
Worker.prototype.on = function (this: Worker, name: string, listener: (value: unknown) => void) {
  if (name !== "message") return on.call(this, name, listener)
  return on.call(this, name, (reply: { ms: number }) => {
    answers.push({ at: performance.now(), commitMs: reply.ms })
    listener(reply)
  })
} as typeof Worker.prototype.on

for (let r = 0; r < rounds; r++) {
  const out = await Effect.runPromise(
    Effect.scoped(
      Effect.gen(function* () {
        const j = yield* SqliteJournal.make({ filename: join(dir, `r${r}.db`), writer: "worker" })
        for (let w = 0; w < 32; w++)
          yield* j.createSession(Records.makeSession({ id: sid(w) as never, principal: "b" }))
        for (let i = 0; i < 50; i++) yield* j.append(sid(0) as never, [event(sid(0), i)])
        posts.length = 0
        answers.length = 0
        const cpu = process.cpuUsage()
        const mainCpu = process.threadCpuUsage()
        const start = performance.now()
        yield* closedLoop(32, perWriter, (w, i) => j.append(sid(w) as never, [event(sid(w), i)]))
        const elapsed = performance.now() - start
        const used = process.cpuUsage(cpu)
        const usedMain = process.threadCpuUsage(mainCpu)
        const n = 32 * perWriter
        const trips = Math.min(posts.length, answers.length) - 1
        let toAnswer = 0
        let commit = 0
        let toNextPost = 0
        for (let i = 0; i < trips; i++) {
          toAnswer += answers[i]!.at - posts[i]!.at
          commit += answers[i]!.commitMs
          toNextPost += posts[i + 1]!.at - answers[i]!.at
        }
        const commits = answers.map((a) => a.commitMs).sort((a, b) => a - b)
        const slow = commits.filter((ms) => ms > 2)
        const sizes = new Map<number, number>()
        for (const p of posts) sizes.set(p.ops, (sizes.get(p.ops) ?? 0) + 1)
        return {
          eventsPerSec: Math.round(n / (elapsed / 1000)),
          mainCpuUsPerAppend: round((usedMain.user + usedMain.system) / n, 1),
          cpuUsPerAppend: round((used.user + used.system) / n, 1),
          batches: Object.fromEntries([...sizes].sort((a, b) => b[1] - a[1]).slice(0, 4)),
          roundTripMs: round(elapsed / posts.length, 3),
          postToAnswerMs: round(toAnswer / trips, 3),
          commitMs: round(commit / trips, 3),
          answerToNextPostMs: round(toNextPost / trips, 3),
          commitP50Ms: round(percentile(commits, 50), 3),
          commitP99Ms: round(percentile(commits, 99), 3),
          commitsOver2Ms: slow.length,
          shareOfCommitTimeOver2Ms: round(slow.reduce((a, b) => a + b, 0) / commits.reduce((a, b) => a + b, 0), 3)
        }
      })
    )
  )
  console.log(JSON.stringify(out))
}
rmSync(dir, { recursive: true, force: true })
