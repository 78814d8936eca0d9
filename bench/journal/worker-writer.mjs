// Prototype for bench/journal: the same batched inserts as the main-thread path, done by a worker
// thread that owns the SQLite connection. Each message is a batch; the reply acknowledges it after commit.
import { parentPort, workerData } from "node:worker_threads"
import Database from "better-sqlite3"

const db = new Database(workerData.filename)
db.pragma("journal_mode = WAL")
db.pragma("synchronous = NORMAL")
db.exec(`CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, tape_seq INTEGER NOT NULL,
  kind TEXT NOT NULL, created_at INTEGER NOT NULL, payload TEXT NOT NULL, hash TEXT NOT NULL, UNIQUE (session_id, tape_seq))`)
const insert = db.prepare(
  "INSERT INTO t (session_id, tape_seq, kind, created_at, payload, hash) VALUES (?, ?, ?, ?, ?, ?)"
)
const commit = db.transaction((rows) => {
  for (const r of rows) insert.run(r[0], r[1], r[2], r[3], r[4], r[5])
})
parentPort.on("message", (message) => {
  commit(message.rows)
  parentPort.postMessage({ id: message.id })
})
