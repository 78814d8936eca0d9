/**
 * Durable facts in the workspace: the identifiers, numbers and names a compaction keeps (its summary's
 * "Facts & identifiers" section, and pinned notes) written into a managed block of a workspace file,
 * `MEMORY.md` by default:
 *
 * ```md
 * <!-- palyra:facts:start -->
 * - ORD-1042
 * - deploy window is 02:00 UTC
 * <!-- palyra:facts:end -->
 * ```
 *
 * - **Idempotent**: the block is the union of the facts already in it and the new ones (oldest first,
 *   capped); when that changes nothing, the file is not written.
 * - **Only the block**: text outside the markers is kept byte for byte; a file without markers gets
 *   the block appended.
 * - **Confined**: the path resolves inside the workspace like the `fs.*` tools (no `..`, absolute
 *   paths elsewhere or symlinks out), is never a secret path (`References.secretPath`) and never a
 *   symlink itself; the write goes to a temporary file beside it and is renamed over it.
 * - **Journaled** by the context engine as a `SessionNote` by author `facts` (the file, the count and
 *   the SHA-256 of the new content) — or, when refused, why.
 *
 * Off unless configured (`ContextEngine` option `factsFile`; `[context] facts_file` in the daemon).
 *
 * @since 0.1.0
 */
import { createHash, randomBytes } from "node:crypto"
import { lstat, readFile, rename, rm, writeFile } from "node:fs/promises"
import { basename, dirname, join, relative } from "node:path"
import { Effect } from "effect"
import { ToolError } from "../../domain/Errors.js"
import { confine } from "../tools/fs.js"
import { secretPath } from "./References.js"

/** @since 0.1.0 @category Constants */
export const START = "<!-- palyra:facts:start -->"
/** @since 0.1.0 @category Constants */
export const END = "<!-- palyra:facts:end -->"
/** Facts kept in the block at most (the oldest go first). @since 0.1.0 @category Constants */
export const MAX_FACTS = 500

const oneLine = (s: string) => s.replace(/\s+/g, " ").replaceAll(START, "").replaceAll(END, "").trim()

const section = (summary: string, name: string): string | undefined => {
  const start = summary.indexOf(`## ${name}\n`)
  if (start < 0) return undefined
  const from = start + name.length + 4
  const next = summary.indexOf("\n## ", from)
  return summary.slice(from, next < 0 ? undefined : next).trim()
}

/**
 * The facts of a compaction summary: the items of its "Facts & identifiers" section (bullets, or a
 * comma-separated line) and its pinned notes.
 *
 * @since 0.1.0
 * @category Parsing
 */
export const factsOf = (summary: string): Array<string> => {
  const out: Array<string> = []
  const facts = section(summary, "Facts & identifiers") ?? ""
  for (const line of facts.split("\n")) {
    const item = line.replace(/^\s*[-*]\s*/, "").trim()
    if (item.length === 0 || /^\(none\)$/i.test(item)) continue
    const parts = line.trimStart().startsWith("-") || line.trimStart().startsWith("*") ? [item] : item.split(", ")
    for (const p of parts) if (oneLine(p).length > 0) out.push(oneLine(p))
  }
  const pinned = section(summary, "Pinned notes (verbatim)") ?? ""
  for (const line of pinned.split("\n")) {
    const item = oneLine(line.replace(/^\s*-\s*/, ""))
    if (item.length > 0) out.push(item)
  }
  return [...new Set(out)]
}

/** The facts in a file's block (empty without one). @since 0.1.0 @category Parsing */
export const blockFacts = (content: string): Array<string> => {
  const start = content.indexOf(START)
  const end = content.indexOf(END, start + START.length)
  if (start < 0 || end < 0) return []
  return content
    .slice(start + START.length, end)
    .split("\n")
    .map((l) => l.replace(/^\s*-\s*/, "").trim())
    .filter((l) => l.length > 0)
}

/**
 * The file's content with its block holding `facts` merged into what it held (the whole file when
 * there was no block: the block appended).
 *
 * @since 0.1.0
 * @category Rendering
 */
export const merge = (content: string, facts: ReadonlyArray<string>): string => {
  const merged = [...new Set([...blockFacts(content), ...facts.map(oneLine).filter((f) => f.length > 0)])].slice(
    -MAX_FACTS
  )
  const block = `${START}\n${merged.map((f) => `- ${f}`).join("\n")}${merged.length > 0 ? "\n" : ""}${END}`
  const start = content.indexOf(START)
  const end = content.indexOf(END, start + START.length)
  if (start >= 0 && end >= 0) return content.slice(0, start) + block + content.slice(end + END.length)
  const sep = content.length === 0 ? "" : content.endsWith("\n\n") ? "" : content.endsWith("\n") ? "\n" : "\n\n"
  return `${content}${sep}${block}\n`
}

/** @since 0.1.0 @category Models */
export interface Written {
  readonly path: string
  /** `false` when the block already held every fact (nothing was written). */
  readonly written: boolean
  readonly facts: number
  /** SHA-256 of the file's content after the call. */
  readonly sha256: string
}

const refused = (message: string) => new ToolError({ tool: "facts", reason: "refused", message })
const failed = (cause: unknown) =>
  new ToolError({ tool: "facts", reason: "failed", message: cause instanceof Error ? cause.message : String(cause) })

/**
 * Merge `facts` into the block of `file` inside the workspace `root` (see the module notes).
 *
 * @since 0.1.0
 * @category Constructors
 */
export const write = (options: {
  readonly root: string
  readonly file: string
  readonly facts: ReadonlyArray<string>
}): Effect.Effect<Written, ToolError> =>
  Effect.gen(function* () {
    if (secretPath(options.file)) return yield* refused(`${options.file} is a secret path`)
    const target = yield* confine("facts", options.root, options.file)
    const link = yield* Effect.promise(() => lstat(target).catch(() => undefined))
    if (link?.isSymbolicLink()) return yield* refused(`${options.file} is a symlink; not writing through it`)
    if (link !== undefined && !link.isFile()) return yield* refused(`${options.file} is not a file`)
    const before =
      link === undefined ? "" : yield* Effect.tryPromise({ try: () => readFile(target, "utf8"), catch: failed })
    const after = merge(before, options.facts)
    const sha256 = createHash("sha256").update(after).digest("hex")
    const facts = blockFacts(after).length
    const path = relative(options.root, target) || basename(target)
    if (after === before) return { path, written: false, facts, sha256 }
    // A temporary file beside the target, renamed over it: readers see the old or the new file.
    const temp = join(dirname(target), `.${basename(target)}.palyra-${randomBytes(6).toString("hex")}`)
    yield* Effect.tryPromise({ try: () => writeFile(temp, after, { flag: "wx", mode: 0o644 }), catch: failed })
    yield* confine("facts", options.root, options.file).pipe(
      Effect.zipRight(Effect.tryPromise({ try: () => rename(temp, target), catch: failed })),
      Effect.tapError(() => Effect.promise(() => rm(temp, { force: true })))
    )
    return { path, written: true, facts, sha256 }
  }).pipe(Effect.withSpan("FactsFile.write", { attributes: { file: options.file }, captureStackTrace: false }))
