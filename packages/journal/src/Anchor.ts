/**
 * Anchors: signed checkpoints of the journal's chain heads, kept outside the database.
 *
 * The journal's chains are self-contained: whoever can write the file can cut its newest rows and
 * rewrite `chain_head` to match, and `verify` passes. An anchor pins what the journal held at a
 * moment: both chain heads (tape rows and record versions, count and hash), the time, and an
 * Ed25519 signature by a key kept in its own file (mode 0600, generated once). Anchors are appended
 * as JSON lines to a witness file (fsynced, never rewritten) and logged, periodically when the heads
 * moved and at shutdown. `verify` then checks every line's signature and that the journal still
 * holds, at each anchored position, the anchored hash: a truncation is named with the anchor that
 * saw more, a rewrite with the row whose hash changed.
 *
 * An anchor only ever signs rows that are durable: it checkpoints the WAL first (fsync), so a power
 * loss cannot leave a witness that claims rows the database lost. At start-up the newest anchor is
 * checked against the journal; a journal that no longer holds it (or a witness signed by another
 * key) refuses to start rather than sign a new history over the old.
 *
 * What anchors do not prove: rows written after the newest anchor; anything, to someone who also
 * holds the key file (they can sign a new history); and a witness file truncated or replaced along
 * with the database. Keep the witness lines (or the log, which carries each line) somewhere the
 * attacker cannot write, and the public key (`<keyFile>.pub`) with whoever verifies.
 *
 * @since 0.1.0
 */
import {
  createHash,
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  type KeyObject,
  sign,
  verify as verifySignature
} from "node:crypto"
import * as fs from "node:fs"
import { dirname } from "node:path"
import { Canonical, Errors } from "@palyra/core"
import { Clock, Context, Duration, Effect, Either, Layer, Option, ParseResult, Schema, type Scope } from "effect"
import type { ChainHead, ChainName, Service as SqliteService } from "./SqliteJournal.js"
import { SqliteJournal } from "./SqliteJournal.js"

/** @since 0.1.0 @category Models */
export interface Options {
  /** The Ed25519 private key (PKCS#8 PEM, mode 0600), created on first use; `<keyFile>.pub` holds its public half. */
  readonly keyFile: string
  /** The append-only witness file (JSON lines). */
  readonly witnessFile: string
  /** How often to anchor when the heads moved (default 60 seconds). */
  readonly every?: Duration.DurationInput | undefined
}

const Hash = Schema.String.pipe(Schema.pattern(/^[0-9a-f]{64}$/))
const Count = Schema.Number.pipe(Schema.int(), Schema.nonNegative())

/**
 * One witness line: the chain heads at `at`, signed. `sig` is the Ed25519 signature (base64) of
 * `palyra-anchor/v1\n` followed by the canonical JSON of every other field.
 *
 * @since 0.1.0
 * @category Models
 */
export const Checkpoint = Schema.Struct({
  v: Schema.Literal(1),
  at: Schema.String,
  count: Count,
  head: Hash,
  records: Count,
  recordsHead: Hash,
  keyId: Schema.String,
  sig: Schema.String
})
/** @since 0.1.0 @category Models */
export type Checkpoint = typeof Checkpoint.Type

const decodeLine = Schema.decodeUnknownEither(Schema.parseJson(Checkpoint))

/**
 * The result of checking a witness file against a journal.
 *
 * - `truncated`: the journal holds fewer rows (or record versions) than an anchor saw;
 * - `rewritten`: the row at an anchored position has another hash than the one signed;
 * - `forged`: a line's signature does not verify, or another key signed it;
 * - `malformed`: a line is not a witness line;
 * - `unanchored`: there is no anchor at all (no file, or an empty one) for a journal that has rows.
 *
 * @since 0.1.0
 * @category Models
 */
export type VerifyResult =
  | {
      readonly ok: true
      /** Anchors checked. */
      readonly anchors: number
      readonly latest: Checkpoint | undefined
      /** What is not covered, e.g. rows written after the newest anchor, a torn last line. */
      readonly notes: ReadonlyArray<string>
    }
  | {
      readonly ok: false
      readonly reason: "truncated" | "rewritten" | "forged" | "malformed" | "unanchored"
      /** 1-based line of the witness file (0 when the file as a whole is at fault). */
      readonly line: number
      readonly detail: string
    }

/** @since 0.1.0 @category Models */
export interface Service {
  /** Anchor now if the heads moved since the last anchor; `None` if they did not (or are not durable yet). */
  readonly checkpoint: Effect.Effect<Option.Option<Checkpoint>, Errors.JournalError>
  /** Identifies the signing key: the first 16 bytes (hex) of SHA-256 over its public key (SPKI DER). */
  readonly keyId: string
}

/** @since 0.1.0 @category Tags */
export class Anchor extends Context.Tag("@palyra/journal/Anchor")<Anchor, Service>() {}

const anchorError = (message: string, cause?: unknown) =>
  new Errors.JournalError({ method: "anchor", message, ...(cause === undefined ? {} : { cause }) })

const attempt = <A>(what: string, f: () => A) =>
  Effect.try({
    try: f,
    catch: (cause) => anchorError(`${what}: ${cause instanceof Error ? cause.message : String(cause)}`, cause)
  })

/** The key id of a public key. @since 0.1.0 @category Keys */
export const keyIdOf = (publicKey: KeyObject): string =>
  createHash("sha256")
    .update(publicKey.export({ type: "spki", format: "der" }))
    .digest("hex")
    .slice(0, 32)

const signedBytes = (c: Omit<Checkpoint, "sig">) =>
  Buffer.from(
    `palyra-anchor/v1\n${Canonical.canonicalJson({
      v: c.v,
      at: c.at,
      count: c.count,
      head: c.head,
      records: c.records,
      recordsHead: c.recordsHead,
      keyId: c.keyId
    })}`
  )

/**
 * The public key to verify with, from a key file: the private key (its public half is derived) or
 * the `.pub` file.
 *
 * @since 0.1.0
 * @category Keys
 */
export const readPublicKey = (file: string): Effect.Effect<KeyObject, Errors.JournalError> =>
  Effect.flatMap(
    attempt(`cannot read the anchor key ${file}`, () => createPublicKey(fs.readFileSync(file, "utf8"))),
    (key) =>
      key.asymmetricKeyType === "ed25519"
        ? Effect.succeed(key)
        : Effect.fail(anchorError(`${file} holds a ${key.asymmetricKeyType} key, not an Ed25519 key`))
  )

/** Load the signing key, creating it (mode 0600) and its `.pub` when `create` and the file is absent. */
const loadSigningKey = (file: string, create: boolean) =>
  attempt(`anchor key ${file}`, () => {
    if (!fs.existsSync(file)) {
      if (!create) return undefined
      fs.mkdirSync(dirname(file), { recursive: true, mode: 0o700 })
      const { privateKey, publicKey } = generateKeyPairSync("ed25519")
      // `wx`: never overwrite a key another process created meanwhile.
      fs.writeFileSync(file, privateKey.export({ type: "pkcs8", format: "pem" }), { mode: 0o600, flag: "wx" })
      fs.chmodSync(file, 0o600)
      fs.writeFileSync(`${file}.pub`, publicKey.export({ type: "spki", format: "pem" }), { mode: 0o644 })
      return { privateKey, publicKey, created: true }
    }
    const mode = fs.statSync(file).mode
    if (process.platform !== "win32" && (mode & 0o077) !== 0) {
      throw new Error(`it is readable or writable by others (mode ${(mode & 0o777).toString(8)}): chmod 600 it`)
    }
    const privateKey = createPrivateKey(fs.readFileSync(file, "utf8"))
    if (privateKey.asymmetricKeyType !== "ed25519") throw new Error("not an Ed25519 private key")
    return { privateKey, publicKey: createPublicKey(privateKey), created: false }
  })

/** Split a witness file into lines; an unterminated last line is a torn write, reported apart. */
const splitWitness = (text: string) => {
  const lines = text.split("\n")
  const torn = lines.pop() ?? ""
  return { lines, torn }
}

/** Read the witness' last complete line (from its tail) and cut a torn last line left by a crash. */
const lastLineRepairing = (file: string) =>
  attempt(`witness file ${file}`, () => {
    if (!fs.existsSync(file)) return { last: undefined, cut: 0 }
    const fd = fs.openSync(file, "r+")
    try {
      const size = fs.fstatSync(fd).size
      const tail = Buffer.alloc(Math.min(size, 64 * 1024))
      fs.readSync(fd, tail, 0, tail.length, size - tail.length)
      const text = tail.toString("utf8")
      const end = text.lastIndexOf("\n")
      if (end < 0 && size > tail.length) throw new Error("its last 64 KiB hold no line break: not a witness file")
      let cut = 0
      if (end < text.length - 1) {
        // A crash mid-append: drop the partial line so the next anchor starts on a line of its own.
        cut = text.length - 1 - end
        fs.ftruncateSync(fd, size - Buffer.byteLength(text.slice(end + 1)))
        fs.fsyncSync(fd)
      }
      const complete = end < 0 ? "" : text.slice(0, end)
      const last = complete.slice(complete.lastIndexOf("\n") + 1)
      return { last: last.length > 0 ? last : undefined, cut }
    } finally {
      fs.closeSync(fd)
    }
  })

const appendLine = (file: string, line: string) =>
  attempt(`cannot write the witness file ${file}`, () => {
    const created = !fs.existsSync(file)
    if (created) fs.mkdirSync(dirname(file), { recursive: true })
    const fd = fs.openSync(file, "a", 0o644)
    try {
      fs.writeSync(fd, `${line}\n`)
      fs.fsyncSync(fd)
    } finally {
      fs.closeSync(fd)
    }
    if (created) {
      // Make the new directory entry durable too.
      const dir = fs.openSync(dirname(file), "r")
      try {
        fs.fsyncSync(dir)
      } finally {
        fs.closeSync(dir)
      }
    }
  })

/** Check one decoded, signed line against the journal; a failure message, or undefined. */
const checkAgainst = (
  journal: Pick<SqliteService, "hashAt" | "chainHead">,
  c: Checkpoint,
  head: ChainHead
): Effect.Effect<{ reason: "truncated" | "rewritten"; detail: string } | undefined, Errors.JournalError> =>
  Effect.gen(function* () {
    const check = (chain: ChainName, position: number, expected: string, present: number, one: string, many: string) =>
      Effect.map(journal.hashAt(chain, position), (actual) =>
        Option.isNone(actual)
          ? {
              reason: "truncated" as const,
              detail: `truncated: the anchor at ${c.at} saw ${position} ${many} with head ${expected}; the file has ${present}`
            }
          : actual.value !== expected
            ? {
                reason: "rewritten" as const,
                detail: `rewritten: ${one} ${position} has hash ${actual.value}, but the anchor at ${c.at} signed ${expected}`
              }
            : undefined
      )
    return (
      (yield* check("tape", c.count, c.head, head.count, "row", "rows")) ??
      (yield* check("records", c.records, c.recordsHead, head.records, "record version", "record versions"))
    )
  })

/** Decode a witness line and check its key and signature. */
const readLine = (
  text: string,
  publicKey: KeyObject,
  keyId: string
): Either.Either<Checkpoint, { readonly reason: "malformed" | "forged"; readonly detail: string }> => {
  const decoded = decodeLine(text)
  if (Either.isLeft(decoded)) {
    const detail = `not a witness line: ${ParseResult.TreeFormatter.formatErrorSync(decoded.left)}`
    return Either.left({ reason: "malformed", detail })
  }
  const c = decoded.right
  if (c.keyId !== keyId) {
    return Either.left({ reason: "forged", detail: `signed by key ${c.keyId}, not by the given key ${keyId}` })
  }
  const ok = (() => {
    try {
      return verifySignature(null, signedBytes(c), publicKey, Buffer.from(c.sig, "base64"))
    } catch {
      return false
    }
  })()
  return ok
    ? Either.right(c)
    : Either.left({ reason: "forged", detail: `the signature does not verify with key ${keyId}` })
}

/**
 * Check a witness file against a journal: every line's signature (with the public key read from
 * `keyFile`, private or `.pub`), and that the journal still holds, at every anchored position of
 * both chains, the anchored hash. Run the journal's own `verify` too: anchors prove the prefix they
 * saw is intact, `verify` proves the rows agree with their chains.
 *
 * @since 0.1.0
 * @category Verification
 */
export const verify = (
  journal: Pick<SqliteService, "hashAt" | "chainHead">,
  options: { readonly witnessFile: string; readonly keyFile: string }
): Effect.Effect<VerifyResult, Errors.JournalError> =>
  Effect.gen(function* () {
    const publicKey = yield* readPublicKey(options.keyFile)
    const keyId = keyIdOf(publicKey)
    const head = yield* journal.chainHead
    const text = yield* attempt(`witness file ${options.witnessFile}`, () =>
      fs.existsSync(options.witnessFile) ? fs.readFileSync(options.witnessFile, "utf8") : undefined
    )
    const notes: Array<string> = []
    if (text === undefined || text.trim().length === 0) {
      if (head.count === 0 && head.records === 0) return { ok: true, anchors: 0, latest: undefined, notes }
      return {
        ok: false,
        reason: "unanchored",
        line: 0,
        detail: `${text === undefined ? `there is no witness file at ${options.witnessFile}` : "the witness file is empty"}, but the journal has ${head.count} rows`
      }
    }
    const { lines, torn } = splitWitness(text)
    if (torn.length > 0) notes.push(`line ${lines.length + 1} is unterminated (a write cut short by a crash): ignored`)
    let latest: Checkpoint | undefined
    let anchors = 0
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i]!
      if (line.trim().length === 0) continue
      const read = readLine(line, publicKey, keyId)
      if (Either.isLeft(read)) {
        return { ok: false, reason: read.left.reason, line: i + 1, detail: `line ${i + 1}: ${read.left.detail}` }
      }
      const failure = yield* checkAgainst(journal, read.right, head)
      if (failure) return { ok: false, ...failure, line: i + 1 }
      latest = read.right
      anchors++
      if (i % 1000 === 999) yield* Effect.yieldNow()
    }
    if (latest === undefined) {
      return { ok: false, reason: "unanchored", line: 0, detail: "the witness file holds no anchor" }
    }
    if (head.count > latest.count || head.records > latest.records) {
      notes.push(
        `${head.count - latest.count} rows and ${head.records - latest.records} record versions were written after the newest anchor (at ${latest.at}); anchors do not cover them`
      )
    }
    return { ok: true, anchors, latest, notes }
  })

/**
 * Start anchoring the journal: check the newest anchor against it (refusing to start when the
 * journal no longer holds it), anchor now, then every `every` when the heads moved, and once more
 * when the scope closes.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = (options: Options): Effect.Effect<Service, Errors.JournalError, SqliteJournal | Scope.Scope> =>
  Effect.gen(function* () {
    const journal = yield* SqliteJournal
    const every = Duration.decode(options.every ?? Duration.seconds(60))
    const { last: lastText, cut } = yield* lastLineRepairing(options.witnessFile)
    if (cut > 0) {
      yield* Effect.logWarning("journal anchor: dropped a torn last line (a crash cut a write short)").pipe(
        Effect.annotateLogs({ witness: options.witnessFile, bytes: cut })
      )
    }
    const key = yield* loadSigningKey(options.keyFile, lastText === undefined)
    if (key === undefined) {
      return yield* anchorError(
        `the witness file ${options.witnessFile} holds anchors, but the key file ${options.keyFile} is missing: restore it, or move the witness file aside to start a new one`
      )
    }
    const keyId = keyIdOf(key.publicKey)
    if (key.created) {
      yield* Effect.logInfo("journal anchor: created a signing key").pipe(
        Effect.annotateLogs({ keyFile: options.keyFile, keyId })
      )
    }

    let last: Checkpoint | undefined
    if (lastText !== undefined) {
      const read = readLine(lastText, key.publicKey, keyId)
      if (Either.isLeft(read)) {
        return yield* anchorError(
          `the last line of ${options.witnessFile} does not check out (${read.left.reason}: ${read.left.detail}); move the witness file aside to start a new one`
        )
      }
      const failure = yield* checkAgainst(journal, read.right, yield* journal.chainHead)
      if (failure) {
        return yield* anchorError(
          `the journal no longer matches its last anchor: ${failure.detail}. Investigate (verify the journal and the witness file) before starting; to start a new witness, move ${options.witnessFile} aside`
        )
      }
      last = read.right
    }

    const lock = yield* Effect.makeSemaphore(1)
    const checkpoint: Service["checkpoint"] = lock.withPermits(1)(
      Effect.gen(function* () {
        const durable = yield* journal.durableHead
        if (Option.isNone(durable)) return Option.none()
        const h = durable.value
        if (
          last !== undefined &&
          last.count === h.count &&
          last.head === h.hash &&
          last.records === h.records &&
          last.recordsHead === h.recordsHash
        ) {
          return Option.none()
        }
        const unsigned = {
          v: 1 as const,
          at: new Date(yield* Clock.currentTimeMillis).toISOString(),
          count: h.count,
          head: h.hash,
          records: h.records,
          recordsHead: h.recordsHash,
          keyId
        }
        const line: Checkpoint = {
          ...unsigned,
          sig: sign(null, signedBytes(unsigned), key.privateKey).toString("base64")
        }
        const json = JSON.stringify(line)
        yield* appendLine(options.witnessFile, json)
        last = line
        yield* Effect.logInfo("journal anchored").pipe(Effect.annotateLogs({ anchor: json }))
        return Option.some(line)
      })
    )
    const periodic = checkpoint.pipe(
      Effect.catchAll((e) => Effect.logError("journal anchor failed", e)),
      Effect.delay(every),
      Effect.forever
    )
    const atShutdown = Effect.gen(function* () {
      yield* checkpoint
      const h = yield* journal.chainHead
      if (last === undefined || last.count !== h.count || last.records !== h.records) {
        yield* Effect.logWarning("journal anchor: the newest rows could not be anchored at shutdown")
      }
    }).pipe(Effect.catchAll((e) => Effect.logError("journal anchor failed at shutdown", e)))

    yield* checkpoint
    // Finalizers run in reverse: the periodic fiber (forked below) stops first, then the last anchor.
    yield* Effect.addFinalizer(() => atShutdown)
    yield* Effect.forkScoped(periodic)
    return { checkpoint, keyId }
  })

/**
 * Anchor the SQLite journal (see the module doc). Mount it so it is released after everything that
 * appends and before the journal: e.g. `Layer.provideMerge(Anchor.layer(options), journalLayer)`.
 *
 * @since 0.1.0
 * @category Layers
 */
export const layer = (options: Options): Layer.Layer<Anchor, Errors.JournalError, SqliteJournal> =>
  Layer.scoped(Anchor, make(options))
