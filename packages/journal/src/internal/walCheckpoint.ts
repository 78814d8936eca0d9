/**
 * The writer's WAL checkpoints, off the commit path (PERF-NOTES round 12, slice A).
 *
 * SQLite's automatic checkpoint runs inside the `COMMIT` that takes the WAL past
 * `wal_autocheckpoint` frames (default 1,000): that one commit copies every frame back into the
 * database file and fsyncs both (4–12 ms here), and whichever turn waits on it is the slow tail. The
 * writer (the one connection that commits nearly everything) instead checkpoints when it is idle —
 * nothing waiting to commit — once the WAL holds `idleFrames` frames not yet copied back: a small
 * `PASSIVE` checkpoint (~1 ms for 256 frames) in a gap between commits rather than a large one inside
 * a commit. SQLite's own automatic checkpoint stays on at `maxFrames` as the hard bound: under load
 * with no idle moment, the commit that crosses it checkpoints as before, so the WAL cannot grow
 * without limit. `journal_size_limit` gives the space of a WAL that grew past that back.
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
import { closeSync, openSync, readSync } from "node:fs"
import { endianness } from "node:os"
import type Database from "better-sqlite3"

/** When the writer checkpoints, in WAL frames (one page each, 4 KiB by default). @internal */
export interface CheckpointPolicy {
  /** Checkpoint when idle once this many frames are not yet copied back (0: never when idle). */
  readonly idleFrames: number
  /** SQLite's automatic checkpoint (`wal_autocheckpoint`), inside a commit: the hard bound. */
  readonly maxFrames: number
}

/**
 * The default, by measurement (PERF-NOTES round 12): 256 frames copy back in ~1–1.5 ms here, against
 * 4–12 ms for the 1,000 of SQLite's default inside a commit; 4,000 frames (16 MiB of 4 KiB pages)
 * before a commit must checkpoint anyway.
 * @internal
 */
export const DEFAULT_POLICY: CheckpointPolicy = { idleFrames: 256, maxFrames: 4000 }

/** The WAL file is truncated back to this once a checkpoint let SQLite restart it (bytes). @internal */
export const JOURNAL_SIZE_LIMIT = 4 * 1024 * 1024

/**
 * Set a connection that may commit to the file to the writer's hard bound: `wal_autocheckpoint` at
 * `maxFrames` and the WAL's size limit. (The writer's connection checkpoints when idle on top.)
 * @internal
 */
export const configureConnection = (db: Database.Database, policy: CheckpointPolicy = DEFAULT_POLICY): void => {
  db.pragma(`wal_autocheckpoint = ${policy.maxFrames}`)
  db.pragma(`journal_size_limit = ${JOURNAL_SIZE_LIMIT}`)
}

/** The wal-index header's frame counts. @internal */
export interface WalFrames {
  /** The last valid frame in the WAL. */
  readonly max: number
  /** Frames already copied back into the database file. */
  readonly backfilled: number
}

/** What an idle checkpoint did. @internal */
export interface IdleCheckpoint {
  readonly ms: number
  readonly frames: number
  readonly checkpointed: number
  readonly busy: boolean
}

/** @internal */
export interface Checkpointer {
  /** The WAL's frame counts now (`undefined`: not in WAL mode, or no wal-index to read). */
  readonly frames: () => WalFrames | undefined
  /**
   * Call when nothing waits to commit: runs a `PASSIVE` checkpoint if `idleFrames` frames wait to be
   * copied back (and the WAL grew since the last one, so a checkpoint a reader held back is not
   * retried at every idle moment); what it did, or `undefined` when it did not run.
   */
  readonly idle: () => IdleCheckpoint | undefined
  readonly close: () => void
}

const HEADER_BYTES = 136
const readU32 = endianness() === "LE" ? Buffer.prototype.readUInt32LE : Buffer.prototype.readUInt32BE

/**
 * The idle checkpoints of the writer's connection to `filename` (a file in WAL mode; the connection
 * already configured by `configureConnection`).
 * @internal
 */
export const makeCheckpointer = (
  db: Database.Database,
  filename: string,
  policy: CheckpointPolicy = DEFAULT_POLICY
): Checkpointer => {
  const header = Buffer.alloc(HEADER_BYTES)
  let fd: number | undefined
  let lastMax = -1
  const frames = (): WalFrames | undefined => {
    try {
      fd ??= openSync(`${filename}-shm`, "r")
      if (readSync(fd, header, 0, HEADER_BYTES, 0) < HEADER_BYTES) return undefined
    } catch {
      return undefined
    }
    // `isInit` (byte 12): the header is valid.
    if (header[12] !== 1) return undefined
    return { max: readU32.call(header, 16), backfilled: readU32.call(header, 96) }
  }
  const idle = (): IdleCheckpoint | undefined => {
    if (policy.idleFrames <= 0) return undefined
    const f = frames()
    if (f === undefined || f.max - f.backfilled < policy.idleFrames || f.max === lastMax) return undefined
    lastMax = f.max
    const t0 = performance.now()
    const r = (db.pragma("wal_checkpoint(PASSIVE)") as Array<{ busy: number; log: number; checkpointed: number }>)[0]
    return {
      ms: performance.now() - t0,
      frames: f.max - f.backfilled,
      checkpointed: r?.checkpointed ?? 0,
      busy: (r?.busy ?? 0) !== 0
    }
  }
  const close = () => {
    if (fd !== undefined) closeSync(fd)
    fd = undefined
  }
  return { frames, idle, close }
}
