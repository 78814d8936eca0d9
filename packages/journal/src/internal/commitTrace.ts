/**
 * An opt-in trace of the writer's commits and checkpoints, to attribute a slow turn (PERF-NOTES round
 * 12): with `PALYRA_JOURNAL_TRACE=<dir>` set, the writer appends one JSON line per commit and per idle
 * checkpoint to `<dir>/journal.<pid>.<thread>.jsonl` — when it started (wall clock, ms), how long it
 * took, the WAL's frames not yet copied back before it, and whether SQLite's automatic checkpoint ran
 * inside the commit. Unset (the default), `makeCommitTrace` returns `undefined` and the writer pays
 * one `undefined` check per batch.
 * @internal
 */
import { appendFileSync } from "node:fs"
import { join } from "node:path"
import { threadId } from "node:worker_threads"
import type { CheckpointPolicy, IdleCheckpoint, WalFrames } from "./walCheckpoint.js"

/** @internal */
export interface CommitTrace {
  /** Around one batch's commit: `frames` reads the WAL's counts. */
  readonly commit: <A>(appends: number, frames: () => WalFrames | undefined, run: () => A) => A
  readonly checkpoint: (at: number, c: IdleCheckpoint) => void
  readonly flush: () => void
}

/** The trace, when `PALYRA_JOURNAL_TRACE` names a directory. @internal */
export const makeCommitTrace = (dir = process.env.PALYRA_JOURNAL_TRACE): CommitTrace | undefined => {
  if (dir === undefined || dir === "") return undefined
  const file = join(dir, `journal.${process.pid}.${threadId}.jsonl`)
  let lines: Array<string> = []
  const flush = () => {
    if (lines.length === 0) return
    appendFileSync(file, `${lines.join("\n")}\n`)
    lines = []
  }
  const push = (line: object) => {
    lines.push(JSON.stringify(line))
    if (lines.length >= 256) flush()
  }
  // Written at least once a second (unref'd: it never keeps the thread alive).
  setInterval(flush, 1000).unref()
  const wall = () => performance.timeOrigin + performance.now()
  return {
    commit: (appends, frames, run) => {
      const before = frames()
      const at = wall()
      const t0 = performance.now()
      const result = run()
      const ms = performance.now() - t0
      const after = frames()
      // The automatic checkpoint ran inside this commit: frames were copied back, all of them.
      const autoCheckpoint =
        before !== undefined &&
        after !== undefined &&
        after.backfilled > before.backfilled &&
        after.backfilled === after.max
      push({
        kind: "commit",
        at,
        ms,
        appends,
        pending: before === undefined ? null : before.max - before.backfilled,
        autoCheckpoint
      })
      return result
    },
    checkpoint: (at, c) => push({ kind: "checkpoint", at, ...c }),
    flush
  }
}

/**
 * For the trace's before/after in one build: with `PALYRA_JOURNAL_TRACE` set AND
 * `PALYRA_JOURNAL_CHECKPOINT=auto`, the writer checkpoints as before round 12 (SQLite's automatic
 * checkpoint at its default 1,000 frames, inside a commit; none when idle). Diagnostic only: without
 * the trace it is ignored.
 * @internal
 */
export const tracedPolicy = (policy: CheckpointPolicy): CheckpointPolicy =>
  process.env.PALYRA_JOURNAL_TRACE && process.env.PALYRA_JOURNAL_CHECKPOINT === "auto"
    ? { idleFrames: 0, maxFrames: 1000 }
    : policy
