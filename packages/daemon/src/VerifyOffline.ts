/**
 * `palyra journal verify --anchor FILE [--db PATH] [--key PATH]`: verify a journal file offline,
 * without a running daemon. Opens the database read-only, recomputes both chains, checks every
 * stored record, then checks every anchor of the witness file (signature, and that the journal
 * still holds what each anchor saw). The database defaults to `<data_dir>/journal.db` and the key to
 * `anchor.key_file` (default `<data_dir>/anchor.key`; the `.pub` beside it also works), resolved as
 * palyrad resolves them (config file, environment, `--config`, `--data-dir`).
 *
 * Exit codes: 0 verified · 1 verification failed, or the journal could not be read · 2 usage or
 * configuration.
 *
 * @since 0.1.0
 */
import type { Errors, Journal } from "@palyra/core"
import { Anchor, SqliteJournal } from "@palyra/journal"
import { Effect } from "effect"

/** What to verify. @since 0.1.0 @category Models */
export interface Request {
  readonly db: string
  readonly witnessFile: string
  readonly keyFile: string
}

/** Both results; `ok` only when both are. @since 0.1.0 @category Models */
export interface Report {
  readonly ok: boolean
  readonly journal: Journal.VerifyResult
  readonly anchor: Anchor.VerifyResult
}

/**
 * How far a verification has got: rows of one chain checked so far, of `total` (the committed chain
 * head's count, read before the walk starts).
 *
 * @since 0.1.0
 * @category Models
 */
export interface Progress {
  readonly chain: SqliteJournal.ChainName
  readonly checked: number
  readonly total: number
}

/**
 * Verify a journal file's chains and stored records, read-only (no anchors); `onProgress` hears
 * after every page read.
 *
 * @since 0.1.0
 * @category Verification
 */
export const verifyChains = (
  db: string,
  onProgress: (progress: Progress) => Effect.Effect<void> = () => Effect.void
): Effect.Effect<Journal.VerifyResult, Errors.JournalError> =>
  Effect.scoped(
    Effect.gen(function* () {
      const journal = yield* SqliteJournal.make({ filename: db, readonly: true })
      const head = yield* journal.chainHead
      return yield* journal.verifyWithProgress(({ chain, checked }) =>
        onProgress({ chain, checked, total: chain === "tape" ? head.count : head.records })
      )
    })
  )

/**
 * Verify a journal file and its witness, read-only; `onProgress` hears after every page read.
 *
 * @since 0.1.0
 * @category Verification
 */
export const verify = (
  request: Request,
  onProgress: (progress: Progress) => Effect.Effect<void> = () => Effect.void
): Effect.Effect<Report, Errors.JournalError> =>
  Effect.scoped(
    Effect.gen(function* () {
      const journal = yield* SqliteJournal.make({ filename: request.db, readonly: true })
      const head = yield* journal.chainHead
      const chains = yield* journal.verifyWithProgress(({ chain, checked }) =>
        onProgress({ chain, checked, total: chain === "tape" ? head.count : head.records })
      )
      const anchor = yield* Anchor.verify(journal, { witnessFile: request.witnessFile, keyFile: request.keyFile })
      return { ok: chains.ok && anchor.ok, journal: chains, anchor }
    })
  )

/** The report as the CLI prints it. @since 0.1.0 @category Formatting */
export const format = (request: Request, report: Report): string => {
  const out = [`journal ${request.db}`]
  const j = report.journal
  out.push(
    j.ok
      ? `  chains: intact (${j.checked} tape rows; record versions and every stored session, run and approval match)`
      : `  chains: BROKEN (${j.reason}) after ${j.checked} good tape rows: ${j.detail}`
  )
  const a = report.anchor
  if (a.ok) {
    out.push(
      a.latest === undefined
        ? `  anchors: none yet (${request.witnessFile}), and the journal is empty`
        : `  anchors: ${a.anchors} verified (${request.witnessFile}, key ${a.latest.keyId}); the newest, at ${a.latest.at}, saw ${a.latest.count} rows and ${a.latest.records} record versions`
    )
    for (const note of a.notes) out.push(`  note: ${note}`)
  } else {
    out.push(`  anchors: FAILED (${a.reason}) in ${request.witnessFile}: ${a.detail}`)
  }
  out.push(report.ok ? "verified" : "NOT verified")
  return `${out.join("\n")}\n`
}
