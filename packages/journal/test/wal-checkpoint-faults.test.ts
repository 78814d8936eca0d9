/**
 * The idle checkpoint's failures (walCheckpoint.ts). SQLite records a copy as done before the
 * database file's fsync that this checkpoint runs on the thread pool, so: a failed WAL fsync or pin
 * gives the checkpoint up with nothing recorded and it is retried; a failed fsync of the database file
 * after the copy is fatal — the pin is never ended (the WAL cannot restart over the only durable copy)
 * and the process is killed with no connection closed, and the next open recovers every row. Faults
 * are injected at the OS boundary (node's `fs.fsync`), on real SQLite files; the fail-stop runs in a
 * real child process.
 */
import { spawn } from "node:child_process"
import { existsSync, mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import Database from "better-sqlite3"
import { afterEach, describe, expect, it, vi } from "vitest"

// Which fsync calls fail (1-based, counted from the test's start): the checkpointer's WAL fsync
// comes first, the database file's second.
const faults = { calls: 0, fail: new Set<number>(), delayMs: 0 }
vi.mock("node:fs", async (importOriginal) => {
  const fs = await importOriginal<typeof import("node:fs")>()
  return {
    ...fs,
    fsync: (fd: number, cb: (e: NodeJS.ErrnoException | null) => void) => {
      faults.calls++
      if (faults.fail.has(faults.calls))
        return setTimeout(() => cb(Object.assign(new Error("EIO: i/o error, fsync"), { code: "EIO" })), faults.delayMs)
      return fs.fsync(fd, cb)
    }
  }
})
const { configureConnection, makeCheckpointer } = await import("../src/internal/walCheckpoint.js")
const { walFrames } = await import("./fixtures/wal.js")

const dir = mkdtempSync(join(tmpdir(), "palyra-walfaults-"))
afterEach(() => {
  faults.calls = 0
  faults.fail.clear()
  faults.delayMs = 0
})

const open = (name: string, rows: number) => {
  const filename = join(dir, name)
  const db = new Database(filename)
  db.pragma("journal_mode = WAL")
  db.pragma("synchronous = NORMAL")
  configureConnection(db)
  db.exec("CREATE TABLE t (i INTEGER PRIMARY KEY, x TEXT)")
  const insert = db.prepare("INSERT INTO t (x) VALUES (?)")
  for (let i = 0; i < rows; i++) insert.run("x".repeat(2000))
  return { filename, db, insert }
}

const until = async (done: () => boolean) => {
  for (let i = 0; i < 500 && !done(); i++) await new Promise((r) => setTimeout(r, 10))
  expect(done()).toBe(true)
}

/** Run a fixture in a child process (tsx, source conditions): what it printed, and how it ended. */
const child = async (fixture: string, ...args: Array<string>) => {
  const proc = spawn(
    process.execPath,
    ["--conditions=@palyra/source", "--import", "tsx", fileURLToPath(new URL(fixture, import.meta.url)), ...args],
    { stdio: ["ignore", "pipe", "pipe"] }
  )
  let out = ""
  let err = ""
  proc.stdout.on("data", (d) => (out += d))
  proc.stderr.on("data", (d) => (err += d))
  const exit = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    proc.on("exit", (code, signal) => resolve({ code, signal }))
  )
  return { out, err, exit }
}

/** The fixture was killed by the fail-stop (it printed nothing, said why), and the WAL is still there. */
const killedWithTheWal = (
  ran: { out: string; err: string; exit: { signal: NodeJS.Signals | null } },
  filename: string
) => {
  expect(ran.out).toBe("")
  expect(ran.exit.signal).toBe("SIGKILL")
  expect(ran.err).toContain("fsync of the database file failed")
  expect(existsSync(`${filename}-wal`)).toBe(true)
}

/** A checkpointer that copies at the first idle frame, reporting warnings and fatal failures to the test. */
const checkpointerOf = (
  db: Parameters<typeof makeCheckpointer>[0],
  filename: string,
  onFatal: (error: unknown) => void,
  onError?: (error: unknown) => void
) => makeCheckpointer(db, filename, { idleFrames: 1, maxFrames: 10_000 }, undefined, onError, onFatal)

describe("the idle checkpoint's failures", () => {
  it("a failed WAL fsync gives the checkpoint up (nothing recorded as copied), and the next one copies", async () => {
    const { filename, db, insert } = open("wal-fsync.db", 200)
    const errors: Array<unknown> = []
    const fatal: Array<unknown> = []
    const checkpointer = checkpointerOf(
      db,
      filename,
      (e) => fatal.push(e),
      (e) => errors.push(e)
    )
    faults.fail.add(1)
    checkpointer.idle(true)
    await until(() => errors.length === 1)
    expect(walFrames(filename).backfilled).toBe(0)
    // Not stuck "under way", and the pin was released: the next idle moment checkpoints everything.
    insert.run("more")
    checkpointer.idle(true)
    await until(() => walFrames(filename).backfilled === walFrames(filename).max)
    expect(fatal).toEqual([])
    checkpointer.close()
    db.close()
  })

  it("a failed fsync of the database file after the copy is fatal, and the WAL is never restarted", async () => {
    const { filename, db, insert } = open("db-fsync.db", 200)
    const fatal: Array<unknown> = []
    const checkpointer = checkpointerOf(db, filename, (e) => fatal.push(e))
    faults.fail.add(2)
    checkpointer.idle(true)
    await until(() => fatal.length === 1)
    const copied = walFrames(filename)
    // SQLite recorded the copy…
    expect(copied.backfilled).toBe(copied.max)
    // …but the pin still holds the WAL: the next commit appends to it instead of restarting it over
    // frames whose copy may not be on disk.
    insert.run("after")
    expect(walFrames(filename).max).toBeGreaterThan(copied.max)
    checkpointer.close()
    db.close()
  })

  it("a close while the file's fsync is in flight waits for it: a failure is fatal with the WAL still there", async () => {
    const { filename, db } = open("close-race.db", 200)
    const log: Array<string> = []
    const checkpointer = checkpointerOf(db, filename, () =>
      log.push(`fatal, WAL kept: ${existsSync(`${filename}-wal`)}`)
    )
    // The file's fsync answers (with an error) 50 ms after it was issued; the close comes before.
    faults.fail.add(2)
    faults.delayMs = 50
    checkpointer.idle(true)
    await until(() => faults.calls >= 2)
    checkpointer.close(() => {
      // The journal's own connection closes last: with every frame recorded as copied, SQLite would
      // delete the WAL here.
      db.close()
      log.push("closed")
    })
    await until(() => log.length > 0)
    await new Promise((r) => setTimeout(r, 50))
    expect(log).toEqual(["fatal, WAL kept: true"])
    db.close()
  })

  it("a close while the file's fsync is in flight finishes once it succeeded", async () => {
    const { filename, db } = open("close-wait.db", 200)
    const checkpointer = makeCheckpointer(db, filename, { idleFrames: 1, maxFrames: 10_000 })
    checkpointer.idle(true)
    await until(() => faults.calls >= 2)
    const closed = await new Promise<boolean>((resolve) => checkpointer.close(() => resolve(true)))
    expect(closed).toBe(true)
    db.close()
    expect(existsSync(`${filename}-wal`)).toBe(false)
  })

  it("a journal closed while that fsync is in flight waits for it: the process is killed before the WAL could go", async () => {
    const filename = join(dir, "closed-meanwhile.db")
    killedWithTheWal(await child("./fixtures/fsync-fails-on-close.ts", filename, "200"), filename)
    const reopened = new Database(filename)
    expect((reopened.prepare("SELECT count(*) AS n FROM tape_events").get() as { n: number }).n).toBe(200)
    reopened.close()
  })

  it("fail-stop: the process is killed with the WAL kept, and every row is recovered from it", async () => {
    const filename = join(dir, "killed.db")
    killedWithTheWal(await child("./fixtures/fsync-fails.ts", filename, "300"), filename)
    const reopened = new Database(filename)
    expect((reopened.prepare("SELECT count(*) AS n FROM t").get() as { n: number }).n).toBe(300)
    expect(reopened.pragma("integrity_check", { simple: true }) as string).toBe("ok")
    reopened.close()
  })
})
