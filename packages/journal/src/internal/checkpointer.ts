import type { MessagePort } from "node:worker_threads"
import type Database from "better-sqlite3"

/**
 * The journal's WAL checkpoints, off the writer's commit path (worker mode). SQLite's automatic
 * checkpoint runs inside the `COMMIT` that crosses `wal_autocheckpoint` frames, so every ~1,000
 * frames one commit also copies the WAL back into the database file and fsyncs both: 5–12 ms during
 * which the writer answers nothing (bench/PERF-NOTES.md, round 10). SQLite's documented alternative
 * is to run checkpoints from another thread: the writer's connection keeps a high automatic
 * threshold (`WRITER_AUTOCHECKPOINT`) only as a bound on the WAL, and a third thread with its own
 * connection runs `PASSIVE` checkpoints (they never block the writer, which keeps appending to the
 * WAL meanwhile) when the main thread asks (`Nudge`, about every `NUDGE_FRAMES` frames committed).
 * @internal
 */

/** Main thread → checkpointer. @internal */
export type ToCheckpointer = { readonly type: "nudge"; readonly n: number } | { readonly type: "close" }

/** Checkpointer → main thread: only when a checkpoint failed (nothing is lost: the writer's bound still holds). @internal */
export interface FromCheckpointer {
  readonly error: string
}

/**
 * The writer connection's `wal_autocheckpoint` when a checkpointer runs beside it: a bound on the
 * WAL (16 MiB of 4 KiB pages) reached only if the checkpointer falls behind, never the usual path.
 * @internal
 */
export const WRITER_AUTOCHECKPOINT = 4000

/**
 * Frames committed (estimated) between two nudges: half SQLite's default threshold, so a checkpoint
 * usually has done its work before the WAL would have reached it. @internal
 */
export const NUDGE_FRAMES = Number(process.env.NUDGE_FRAMES ?? 500)

/**
 * WAL frames a commit of `appends` appends writes, roughly: one table or index page per append
 * (their sessions' index leaves are mostly distinct) plus the chain head, the table's last leaf and
 * a session row. Only paces the nudges; an estimate off by 2× only moves a checkpoint earlier or later.
 * @internal
 */
export const framesOf = (appends: number): number => appends + 3

/**
 * Run the checkpointer on `port` with its own connection `db`: each nudge runs one `PASSIVE`
 * checkpoint, except nudges sent before the last checkpoint started (they are covered by it).
 * @internal
 */
export const runCheckpointer = (port: MessagePort, db: Database.Database): void => {
  // Nudges are numbered; a checkpoint covers every nudge posted before it started.
  let latest = 0
  let covered = 0
  port.on("message", (message: ToCheckpointer) => {
    if (message.type === "close") {
      db.close()
      port.close()
      return
    }
    latest = Math.max(latest, message.n)
    if (message.n <= covered) return
    covered = latest
    try {
      db.pragma("wal_checkpoint(PASSIVE)")
    } catch (error) {
      const answer: FromCheckpointer = { error: error instanceof Error ? error.message : String(error) }
      port.postMessage(answer)
    }
  })
}
