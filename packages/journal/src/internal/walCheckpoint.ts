/**
 * The writer's WAL checkpoints, off the commit path (PERF-NOTES round 12, slice A).
 *
 * SQLite's automatic checkpoint runs inside the `COMMIT` that takes the WAL past
 * `wal_autocheckpoint` frames (default 1,000): that one commit copies every frame back into the
 * database file and fsyncs both (4–12 ms here), and whichever turn waits on it is the slow tail. The
 * writer (the one connection that commits nearly everything) instead checkpoints when it is idle —
 * nothing waiting to commit — once the WAL holds `idleFrames` frames not yet copied back: a `PASSIVE`
 * checkpoint in a gap between commits rather than inside one, its fsyncs on libuv's thread pool (see
 * `makeCheckpointer`). SQLite's own automatic checkpoint stays on at `maxFrames` as the hard bound: under load
 * with no idle moment, the commit that crosses it checkpoints as before, so the WAL cannot grow
 * without limit. `journal_size_limit` gives the space of a WAL that grew well past that back (`walSizeLimit`).
 *
 * Durability does not change: the checkpoint is SQLite's own (`PASSIVE`: it never waits on a reader,
 * copies what no reader still needs, and fsyncs the WAL before and the file after, as an automatic one
 * does), on the writer's own connection and thread. Other connections to the file (the main thread's
 * reads, the stores beside the journal) get the same hard bound, so none of them starts checkpointing
 * first; a read-only connection never checkpoints (SQLite checkpoints only after a commit).
 *
 * How full the WAL is comes from the wal-index header in the `-shm` file, which SQLite documents
 * (https://www.sqlite.org/walformat.html, "the WAL-index header"): `mxFrame` (the last valid frame)
 * at byte 16 and `nBackfill` (frames already copied back) at byte 96, in native byte order. One
 * 136-byte `pread`, about a microsecond; a torn read only misjudges one idle moment.
 * @internal
 */
import { closeSync, fsync, openSync, readSync, writeSync } from "node:fs"
import { endianness } from "node:os"
import Database from "better-sqlite3"

/** When the writer checkpoints, in WAL frames (one page each, 4 KiB by default). @internal */
export interface CheckpointPolicy {
  /** Checkpoint when idle once this many frames are not yet copied back (0: never when idle). */
  readonly idleFrames: number
  /** SQLite's automatic checkpoint (`wal_autocheckpoint`), inside a commit: the hard bound. */
  readonly maxFrames: number
}

/**
 * The default, by measurement (PERF-NOTES round 12): at SQLite's own 1,000 frames the copy holds the
 * writer 0.4–1.2 ms (the fsyncs run off the thread); checkpointing every 256 frames cost ~10% more
 * CPU per append (hot pages — the tape's last leaf, `chain_head` — are copied and synced once per
 * checkpoint, so more checkpoints copy more). A commit checkpoints itself (fsyncs inline) only past 10,000 frames (40 MiB of 4 KiB pages): under
 * continuous load, where no pause lets the WAL restart (`QUIET_MS`), that is once per 10,000 frames
 * rather than every 1,000.
 * @internal
 */
export const DEFAULT_POLICY: CheckpointPolicy = { idleFrames: 1000, maxFrames: 10_000 }

/**
 * After this long without a commit the writer checkpoints what is left (`Checkpointer.idle(true)`):
 * only a checkpoint with no commit during its fsyncs copies every frame, which lets SQLite restart
 * the WAL at the next commit instead of growing it to the hard bound.
 * @internal
 */
export const QUIET_MS = 50

/**
 * The WAL file is truncated back to this many bytes when SQLite restarts it (`journal_size_limit`):
 * 1.5 × the hard bound's frames (4 KiB pages, 24-byte frame headers), so the WAL the writer keeps is
 * never cut in the normal cycle and only one that a reader held past the hard bound is given back.
 * SQLite truncates inside the first commit after a restart, and that truncation took 4–16 ms here
 * (ext4 freeing the extents), in a commit a caller waits on; without it the restart costs ~1 ms
 * (PERF-NOTES round 14, slice J). A 4 MiB limit cut the WAL at almost every restart: the WAL grows
 * well past `idleFrames` between restarts, since a restart needs every frame copied back.
 * @internal
 */
export const walSizeLimit = (policy: CheckpointPolicy): number => Math.ceil(policy.maxFrames * (4096 + 24) * 1.5)

/**
 * Set a connection that may commit to the file to the writer's hard bound: `wal_autocheckpoint` at
 * `maxFrames` and the WAL's size limit. (The writer's connection checkpoints when idle on top.)
 * @internal
 */
export const configureConnection = (db: Database.Database, policy: CheckpointPolicy = DEFAULT_POLICY): void => {
  db.pragma(`wal_autocheckpoint = ${policy.maxFrames}`)
  db.pragma(`journal_size_limit = ${walSizeLimit(policy)}`)
}

/** The wal-index header's frame counts. @internal */
export interface WalFrames {
  /** The last valid frame in the WAL. */
  readonly max: number
  /** Frames already copied back into the database file. */
  readonly backfilled: number
}

/** What an idle checkpoint did (times in ms). @internal */
export interface IdleCheckpoint {
  /** The copy back into the database file: the only part that holds the writer's thread. */
  readonly ms: number
  /** The WAL's fsync before, the file's after (on libuv's thread pool). */
  readonly walSyncMs: number
  readonly dbSyncMs: number
  readonly frames: number
  readonly checkpointed: number
}

/** @internal */
export interface Checkpointer {
  /** The WAL's frame counts now (`undefined`: not in WAL mode, or no wal-index to read). */
  readonly frames: () => WalFrames | undefined
  /**
   * Call when nothing waits to commit: starts a checkpoint if `idleFrames` frames wait to be copied
   * back, none is under way, and the WAL grew since the last one (so a checkpoint a reader held back
   * is not retried at every idle moment). `quiet`: nothing was committed for a while (`QUIET_MS`):
   * checkpoint whatever is left, so the WAL can restart from its beginning at the next commit.
   */
  readonly idle: (quiet?: boolean) => void
  /**
   * Before the writer's connection closes: releases the pin and files, after the database file's
   * fsync under way (if any) has answered — `done` runs then; close the connection only in it.
   */
  readonly close: (done?: () => void) => void
  /** Whether the database file's fsync after a copy is in flight (the writer must not die meanwhile). */
  readonly syncing: () => boolean
}

const HEADER_BYTES = 136
const readU32 = endianness() === "LE" ? Buffer.prototype.readUInt32LE : Buffer.prototype.readUInt32BE

/**
 * The idle checkpoints of the writer's connection to `filename` (a file in WAL mode; the connection
 * configured by `configureConnection`). A checkpoint's two fsyncs — most of its time, and the part
 * that varies (1–25 ms here) — run on libuv's thread pool, so this thread only copies pages (0.4–1.2
 * ms for 256–1,000 frames); commits go on meanwhile. In SQLite's own order, so a power loss at any
 * point leaves a file SQLite recovers exactly as from its own checkpoint:
 *
 * 1. A read transaction on a second, read-only connection pins the WAL's current last frame `M`: a
 *    checkpoint copies no frame past it, and SQLite cannot restart (overwrite) the WAL while it is open.
 * 2. fsync the WAL (every frame up to `M` was written before).
 * 3. `PASSIVE` checkpoint with `synchronous = OFF` for that one statement: it copies frames up to `M`
 *    (or less, if a reader on another connection needs older ones) without syncing — step 2 did the
 *    WAL's, step 4 does the file's.
 * 4. fsync the database file, then end the read transaction: only now may the WAL restart.
 *
 * SQLite's own checkpoint records the copy as done only after the file's fsync succeeded; here step 3
 * records it before step 4. So a failed step 4 is fatal (`failStop`): the process is killed with the
 * pin held and no connection closed, and the next open recovers every frame from the WAL. Any other
 * failure (the pin not available at once, a WAL fsync or a copy that failed) gives the checkpoint up
 * with nothing recorded as copied (`onError`); it is tried again when the writer is next idle.
 *
 * With `synchronous = FULL` (every commit fsyncs), or when the second connection or the files cannot
 * be opened, the checkpoint runs as SQLite's own (`PASSIVE`, syncing inline), still only when idle.
 * `onCheckpoint` hears what each did (the commit trace).
 * @internal
 */
export const makeCheckpointer = (
  db: Database.Database,
  filename: string,
  policy: CheckpointPolicy = DEFAULT_POLICY,
  onCheckpoint?: ((at: number, c: IdleCheckpoint) => void) | undefined,
  /** A checkpoint given up (it is tried again later; the WAL keeps every frame meanwhile). */
  onError?: ((error: unknown) => void) | undefined,
  /** A failed fsync of the database file after a copy (tests replace the process kill). */
  fatal: (error: unknown) => void = failStop
): Checkpointer => {
  const header = Buffer.alloc(HEADER_BYTES)
  const synchronous = (db.pragma("synchronous", { simple: true }) as number) === 1 ? "NORMAL" : undefined
  let shm: number | undefined
  let files: { readonly wal: number; readonly db: number; readonly pin: Pin } | null | undefined
  let lastMax = -1
  let underWay = false
  let closed = false
  /** The database file's fsync after a copy, while in flight (a close waits for its callback). */
  let syncing: { closed?: (() => void) | undefined } | undefined
  const frames = (): WalFrames | undefined => {
    try {
      shm ??= openSync(`${filename}-shm`, "r")
      if (readSync(shm, header, 0, HEADER_BYTES, 0) < HEADER_BYTES) return undefined
    } catch {
      return undefined
    }
    // `isInit` (byte 12): the header is valid.
    if (header[12] !== 1) return undefined
    return { max: readU32.call(header, 16), backfilled: readU32.call(header, 96) }
  }
  const open = () => {
    if (files !== undefined) return files
    let wal: number | undefined
    let file: number | undefined
    try {
      // Opened for writing too: fsync needs write access on some platforms (Windows).
      wal = openSync(`${filename}-wal`, "r+")
      file = openSync(filename, "r+")
      files = { wal, db: file, pin: makePin(filename) }
    } catch {
      if (wal !== undefined) closeSync(wal)
      if (file !== undefined) closeSync(file)
      files = null
    }
    return files
  }
  const passive = () =>
    (db.pragma("wal_checkpoint(PASSIVE)") as Array<{ busy: number; log: number; checkpointed: number }>)[0]
  /** Give up this checkpoint (nothing copied, or a copy SQLite did not record): the WAL stays as it was. */
  const abandon = (fs: NonNullable<typeof files>, error: unknown) => {
    try {
      fs.pin.end()
    } catch {
      // The pin's connection failed too: its transaction ends when it closes.
    }
    underWay = false
    onError?.(error)
  }
  const idle = (quiet = false) => {
    if (policy.idleFrames <= 0 || underWay || closed) return
    const f = frames()
    if (f === undefined || f.max - f.backfilled < (quiet ? 1 : policy.idleFrames) || (!quiet && f.max === lastMax))
      return
    lastMax = f.max
    const at = performance.timeOrigin + performance.now()
    const pending = f.max - f.backfilled
    const fs = synchronous === undefined ? null : open()
    if (fs === null) {
      // SQLite's own checkpoint, fsyncs inline. Its errors are its own (as an automatic checkpoint's
      // are ignored by SQLite): nothing is recorded as copied that was not synced.
      const t0 = performance.now()
      let r: ReturnType<typeof passive>
      try {
        r = passive()
      } catch (error) {
        return onError?.(error)
      }
      onCheckpoint?.(at, {
        ms: performance.now() - t0,
        walSyncMs: 0,
        dbSyncMs: 0,
        frames: pending,
        checkpointed: r?.checkpointed ?? 0
      })
      return
    }
    underWay = true
    try {
      // Never waits: a pin it cannot take now (another connection recovering the WAL) is tried later.
      fs.pin.begin()
    } catch (error) {
      return abandon(fs, error)
    }
    const t0 = performance.now()
    fsync(fs.wal, (walError) => {
      const t1 = performance.now()
      if (closed) return
      // Nothing copied yet: try again when the WAL has grown.
      if (walError !== null) return abandon(fs, walError)
      try {
        db.pragma("synchronous = OFF")
      } catch (error) {
        return abandon(fs, error)
      }
      let r: ReturnType<typeof passive>
      let copyError: unknown
      try {
        r = passive()
      } catch (error) {
        copyError = error
      }
      try {
        db.pragma(`synchronous = ${synchronous}`)
      } catch (error) {
        // The connection would commit without syncing from here on: stop (nothing closed, the pin
        // held — after a copy SQLite recorded, the file's pages are not known to be on disk either).
        return fatal(error)
      }
      // A copy that failed (a full disk, an I/O error) records nothing as copied: the WAL still holds
      // every frame, and the next checkpoint copies them again.
      if (copyError !== undefined) return abandon(fs, copyError)
      const t2 = performance.now()
      const sync: { closed?: (() => void) | undefined } = {}
      syncing = sync
      fsync(fs.db, (dbError) => {
        syncing = undefined
        // The copy is recorded as done (SQLite's `nBackfill`) but the file's fsync failed: its pages
        // may never reach the disk (Linux reports a writeback error once and marks the pages clean,
        // so a retry "succeeds"), and once the pin ends SQLite may restart the WAL — or a closing
        // connection delete it — over the only durable copy. Fail-stop, before anything else runs:
        // the process dies with the pin held and no connection closed, and the next open recovers
        // every frame from the WAL (PostgreSQL's answer to the same fsync failure).
        if (dbError !== null) return fatal(dbError)
        // A close that came meanwhile waited for this (`close`): it finishes now.
        if (closed) return sync.closed?.()
        fs.pin.end()
        underWay = false
        onCheckpoint?.(at, {
          ms: t2 - t1,
          walSyncMs: t1 - t0,
          dbSyncMs: performance.now() - t2,
          frames: pending,
          checkpointed: r?.checkpointed ?? 0
        })
      })
    })
  }
  const shut = () => {
    // Nothing copied is unsynced here (a copy's fsync is always awaited: `close`), so the pin may end.
    if (files) {
      files.pin.close()
      closeSync(files.wal)
      closeSync(files.db)
    }
    if (shm !== undefined) closeSync(shm)
  }
  const close = (done: () => void = () => {}) => {
    if (closed) return done()
    closed = true
    // Only the in-flight fsync of the file knows whether the copy reached the disk (a second fsync of
    // the same descriptor may return success after the first took the error): nothing is closed
    // before its callback, which fails the process or finishes the close.
    if (syncing !== undefined) {
      syncing.closed = () => {
        // In that fsync's callback: a failure to release a file must not keep the close from finishing.
        try {
          shut()
        } finally {
          done()
        }
      }
      return
    }
    shut()
    done()
  }
  return { frames, idle, close, syncing: () => syncing !== undefined }
}

/**
 * Stop the process at once, closing nothing (no connection may checkpoint or delete the WAL on its
 * way out): what is committed is in the WAL, and the next open recovers it. Works from a worker too
 * (`process.abort` does not).
 * @internal
 */
export const failStop = (error: unknown): never => {
  try {
    writeSync(
      2,
      `palyra journal: fsync of the database file failed after a WAL checkpoint copied into it (${String(error)}); stopping the process so the WAL is kept: restart to recover\n`
    )
  } finally {
    process.kill(process.pid, "SIGKILL")
  }
  throw error
}

/**
 * A process warning for a given-up idle checkpoint, once per distinct message (it is retried at the
 * next idle moment, which would otherwise repeat the same warning).
 * @internal
 */
export const warnOnce = (): ((error: unknown) => void) => {
  let last = ""
  return (error) => {
    const message = error instanceof Error ? error.message : String(error)
    if (message === last) return
    last = message
    process.emitWarning(`an idle WAL checkpoint was given up (tried again later): ${message}`, "PalyraJournalWarning")
  }
}

/** A read transaction that pins the WAL's current last frame (step 1 above). */
interface Pin {
  readonly begin: () => void
  readonly end: () => void
  readonly close: () => void
}

const makePin = (filename: string): Pin => {
  // Read-only: it never commits, so it never checkpoints (nor when it closes).
  const reader = new Database(filename, { readonly: true, fileMustExist: true, timeout: 0 })
  const begin = reader.prepare("BEGIN")
  const read = reader.prepare("SELECT 1 FROM sqlite_master LIMIT 1")
  const end = reader.prepare("COMMIT")
  return {
    begin: () => {
      begin.run()
      read.get()
    },
    end: () => {
      if (reader.inTransaction) end.run()
    },
    close: () => {
      if (reader.inTransaction) end.run()
      reader.close()
    }
  }
}
