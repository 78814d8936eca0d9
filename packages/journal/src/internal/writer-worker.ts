/**
 * The journal's writer thread (`worker_threads`): owns the write connection to the journal's file
 * and runs `writer.ts` on the batches the main thread submits (two strings a batch, see
 * `protocol.ts`), answering after they committed. Batches arrive through the shared ring
 * (`ring.ts`) or, when it is full or a batch is too big for it, by message on `workerData.port`; both
 * carry one id sequence and ring one doorbell, and this thread takes them in id order. It runs one
 * synchronous loop: sleep in `Atomics.wait` on the doorbell, take every batch that is there (those
 * that formed while the last commit ran, up to `maxBatch` ops), commit them in one go, answer with
 * one message. Built as its own entry (`dist/writer-worker.js`); from sources it runs under tsx. A
 * throw here ends the thread, which the main thread reports as a `JournalError` on everything not
 * yet answered.
 * @internal
 */
import { type MessagePort, parentPort, receiveMessageOnPort, workerData } from "node:worker_threads"
import Database from "better-sqlite3"
import { decodeBatch, encodeAnswer, type Op, type ToWorker } from "./protocol.js"
import { ringReader } from "./ring.js"
import { makeWriter } from "./writer.js"

/** What the main thread passes in `workerData`. @internal */
export interface WorkerOptions {
  readonly filename: string
  readonly synchronous: "NORMAL" | "FULL"
  readonly busyTimeoutMs: number
  readonly maxBatch: number
  /** The request ring (`ring.ts`). */
  readonly ring: SharedArrayBuffer
  /** Where batches that did not go through the ring, and `close`, arrive (transferred). */
  readonly port: MessagePort
}

const options = workerData as WorkerOptions
const answers = parentPort!
const db = new Database(options.filename, { fileMustExist: true })
db.pragma("journal_mode = WAL")
db.pragma(`synchronous = ${options.synchronous}`)
db.pragma(`busy_timeout = ${options.busyTimeoutMs}`)
db.pragma("foreign_keys = ON")
db.pragma("secure_delete = ON")
const writer = makeWriter(db, options.maxBatch)
const ring = ringReader(options.ring)

let expected = 0
// A message received ahead of its turn (its id is past a ring entry still to be taken).
let early: ToWorker | undefined

/** The submission with the next id, from the ring or the port, or `undefined` if it has not arrived. */
const take = (): ToWorker | undefined => {
  if (ring.peek() === expected) {
    expected++
    return { type: "batch", ...ring.take() }
  }
  if (early === undefined) early = receiveMessageOnPort(options.port)?.message as ToWorker | undefined
  if (early?.id !== expected) return undefined
  const message = early
  early = undefined
  expected++
  return message
}

for (;;) {
  const bell = ring.bell()
  const first = take()
  if (first === undefined) {
    ring.wait(bell)
    continue
  }
  if (first.type === "close") break
  // What else is already there commits with it (group commit across submissions).
  const ops: Array<Op> = decodeBatch(first)
  let n = 1
  let next: ToWorker | undefined
  while (ops.length < options.maxBatch) {
    next = take()
    if (next === undefined || next.type === "close") break
    for (const op of decodeBatch(next)) ops.push(op)
    n++
  }
  const t0 = performance.now()
  const results = writer.commit(ops)
  const { reply, transfer } = encodeAnswer(first.id, n, performance.now() - t0, results)
  answers.postMessage(reply, transfer)
  if (next?.type === "close") break
}
db.close()
options.port.close()
answers.close()
