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
import { join } from "node:path"
import type { Errors, Journal } from "@palyra/core"
import { Anchor, SqliteJournal } from "@palyra/journal"
import { Effect, Either } from "effect"
import * as Config from "./Config.js"

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

/** Verify a journal file and its witness, read-only. @since 0.1.0 @category Verification */
export const verify = (request: Request): Effect.Effect<Report, Errors.JournalError> =>
  Effect.scoped(
    Effect.gen(function* () {
      const journal = yield* SqliteJournal.make({ filename: request.db, readonly: true })
      const chains = yield* journal.verify
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

/**
 * The CLI branch: resolve paths, verify, print; resolves with the exit code.
 *
 * @since 0.1.0
 * @category Main
 */
export const main = async (
  options: Readonly<Record<string, string | true>>,
  env: Record<string, string | undefined>,
  io: { readonly out: (text: string) => void; readonly err: (text: string) => void }
): Promise<number> => {
  const value = (name: string) => {
    const v = options[name]
    return typeof v === "string" ? v : undefined
  }
  const witnessFile = value("anchor")
  if (witnessFile === undefined) {
    io.err("palyra: journal verify --anchor needs the witness file (e.g. <data_dir>/journal.anchor)\n")
    return 2
  }
  const db = value("db")
  const key = value("key")
  let config: Config.Config | undefined
  if (db === undefined || key === undefined) {
    const loaded = await Effect.runPromise(
      Effect.either(Config.load({ config: value("config"), dataDir: value("data-dir") }, env))
    )
    if (Either.isLeft(loaded)) {
      io.err(`palyra: ${loaded.left.message}\n`)
      return 2
    }
    config = loaded.right
  }
  const request: Request = {
    db: db ?? join(config!.dataDir, "journal.db"),
    witnessFile,
    keyFile: key ?? config!.anchorKeyFile
  }
  const report = await Effect.runPromise(Effect.either(verify(request)))
  if (Either.isLeft(report)) {
    io.err(`palyra: cannot verify ${request.db}: ${report.left.message}\n`)
    return 1
  }
  io.out(format(request, report.right))
  return report.right.ok ? 0 : 1
}
