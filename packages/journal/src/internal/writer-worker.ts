/**
 * The journal's writer thread (`worker_threads`): owns the write connection to the journal's file
 * and runs `writer.ts` on the batches the main thread posts (two strings a batch, see
 * `protocol.ts`), answering each batch after it committed. Built as its own entry
 * (`dist/writer-worker.js`); from sources it runs under tsx. A throw here ends the thread, which the
 * main thread reports as a `JournalError` on everything not yet answered.
 * @internal
 */
import { parentPort, workerData } from "node:worker_threads"
import Database from "better-sqlite3"
import { decodeBatch, encodeAnswer, type ToWorker } from "./protocol.js"
import { makeWriter } from "./writer.js"

/** What the main thread passes in `workerData`. @internal */
export interface WorkerOptions {
  readonly filename: string
  readonly synchronous: "NORMAL" | "FULL"
  readonly busyTimeoutMs: number
  readonly maxBatch: number
}

const options = workerData as WorkerOptions
const port = parentPort!
const db = new Database(options.filename, { fileMustExist: true })
db.pragma("journal_mode = WAL")
db.pragma(`synchronous = ${options.synchronous}`)
db.pragma(`busy_timeout = ${options.busyTimeoutMs}`)
db.pragma("foreign_keys = ON")
db.pragma("secure_delete = ON")
const writer = makeWriter(db, options.maxBatch)

port.on("message", (message: ToWorker) => {
  if (message.type === "close") {
    db.close()
    port.close()
    return
  }
  const t0 = performance.now()
  const results = writer.commit(decodeBatch(message))
  const { reply, transfer } = encodeAnswer(message.id, performance.now() - t0, results)
  port.postMessage(reply, transfer)
})
