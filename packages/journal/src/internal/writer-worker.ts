/**
 * The journal's writer thread (`worker_threads`): owns the write connection to the journal's file
 * and runs `writer.ts` on the batches the main thread posts (two strings a batch, see
 * `protocol.ts`), answering each batch after it committed. Built as its own entry
 * (`dist/writer-worker.js`); from sources it runs under tsx. A throw here ends the thread, which the
 * main thread reports as a `JournalError` on everything not yet answered.
 * @internal
 */
import { parentPort, receiveMessageOnPort, workerData } from "node:worker_threads"
import Database from "better-sqlite3"
import { makeCommitTrace, tracedPolicy } from "./commitTrace.js"
import { decodeBatch, encodeAnswer, type ToWorker } from "./protocol.js"
import { lowerThisThread, writerNiceOffset } from "./threadPriority.js"
import {
  type CheckpointPolicy,
  configureConnection,
  failStop,
  makeCheckpointer,
  QUIET_MS,
  warnOnce
} from "./walCheckpoint.js"
import { makeWriter } from "./writer.js"

/** What the main thread passes in `workerData`. @internal */
export interface WorkerOptions {
  readonly filename: string
  readonly synchronous: "NORMAL" | "FULL"
  readonly busyTimeoutMs: number
  readonly maxBatch: number
  readonly checkpoint: CheckpointPolicy
}

const options = workerData as WorkerOptions
// Optionally below the main thread, so waking it for a batch does not take the main thread's core (threadPriority.ts).
lowerThisThread(writerNiceOffset())
const policy = tracedPolicy(options.checkpoint)
const port = parentPort!
const db = new Database(options.filename, { fileMustExist: true })
db.pragma("journal_mode = WAL")
db.pragma(`synchronous = ${options.synchronous}`)
db.pragma(`busy_timeout = ${options.busyTimeoutMs}`)
db.pragma("foreign_keys = ON")
db.pragma("secure_delete = ON")
configureConnection(db, policy)
const writer = makeWriter(db, options.maxBatch)
const trace = makeCommitTrace()
const checkpointer = makeCheckpointer(db, options.filename, policy, trace?.checkpoint, warnOnce())
let closed = false
// A throw that would end this thread while a checkpoint's fsync of the file is in flight: the thread's
// connections would close (better-sqlite3's cleanup) before that fsync answered, and the main thread's
// close could then delete the WAL over pages not known to be on disk — stop the process instead.
process.on("uncaughtException", (error) => {
  if (checkpointer.syncing()) failStop(error)
  throw error
})
// Re-armed after every batch: fires once the writer has committed nothing for QUIET_MS.
const quiet = setTimeout(() => {
  if (!closed) checkpointer.idle(true)
}, QUIET_MS).unref()

const handle = (message: ToWorker) => {
  if (closed) return
  if (message.type === "close") {
    closed = true
    clearTimeout(quiet)
    trace?.flush()
    // The connection closes once a checkpoint's fsync under way has answered (walCheckpoint.ts).
    checkpointer.close(() => {
      db.close()
      port.close()
    })
    return
  }
  const t0 = performance.now()
  const ops = decodeBatch(message)
  const results =
    trace === undefined ? writer.commit(ops) : trace.commit(ops.length, checkpointer.frames, () => writer.commit(ops))
  const { reply, transfer } = encodeAnswer(message.id, performance.now() - t0, results)
  port.postMessage(reply, transfer)
}

port.on("message", (message: ToWorker) => {
  handle(message)
  // Batches that arrived meanwhile go first (taken straight off the port); only when none waits is
  // the writer idle, and may checkpoint (walCheckpoint.ts): never inside a commit a caller waits on.
  while (!closed) {
    const next = receiveMessageOnPort(port)
    if (next === undefined) break
    handle(next.message as ToWorker)
  }
  if (closed) return
  checkpointer.idle()
  quiet.refresh()
})
