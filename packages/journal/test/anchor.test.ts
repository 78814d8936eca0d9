// Anchors: signed checkpoints of the chain heads in a witness file kept apart from the database.
// Real files in a temp dir; the attacker edits the database (and the witness) with plain tools.
import { generateKeyPairSync, sign } from "node:crypto"
import {
  appendFileSync,
  chmodSync,
  existsSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync
} from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Canonical, Records } from "@palyra/core"
import Database from "better-sqlite3"
import { type Duration, Effect, HashMap, Layer, Logger, Option, Schedule } from "effect"
import { Anchor, SqliteJournal } from "../src/index.js"
import { versionHash, versionOf } from "../src/internal/records.js"

const root = mkdtempSync(join(tmpdir(), "palyra-anchor-"))
let n = 0
const S = "01KA0000000000000000000SES" as never
const RUN = "01KA0000000000000000000RUN" as never

interface Files {
  readonly filename: string
  readonly keyFile: string
  readonly witnessFile: string
}
const files = (): Files => {
  const dir = mkdtempSync(join(root, `case${n++}-`))
  // The key lives in its own directory, apart from the database.
  return {
    filename: join(dir, "journal.db"),
    keyFile: join(dir, "keys", "anchor.key"),
    witnessFile: join(dir, "journal.anchor")
  }
}
const note = (i: number) => ({
  _tag: "SessionNote" as const,
  sessionId: S,
  runId: null,
  at: 1000 + i,
  author: "a",
  text: `note ${i}`
})

/** Run `f` with the journal open and anchoring (`every` short, so the periodic path runs too). */
const anchored = <A, E>(
  f: Files,
  body: (j: SqliteJournal.Service, a: Anchor.Service) => Effect.Effect<A, E>,
  every: Duration.DurationInput = "1 hour"
) =>
  Effect.gen(function* () {
    const j = yield* SqliteJournal.SqliteJournal
    const a = yield* Anchor.Anchor
    return yield* body(j, a)
  }).pipe(
    Effect.provide(
      Layer.provideMerge(
        Anchor.layer({ keyFile: f.keyFile, witnessFile: f.witnessFile, every }),
        SqliteJournal.layer({ filename: f.filename })
      )
    ),
    Effect.provide(Logger.remove(Logger.defaultLogger))
  )

/** A journal with a session, ten notes and a run; anchored at start, once in between, and at close. */
const seed = (f: Files) =>
  anchored(f, (j, a) =>
    Effect.gen(function* () {
      yield* j.createSession(Records.makeSession({ id: S, principal: "alice" }))
      for (let i = 0; i < 5; i++) yield* j.append(S, [note(i)])
      yield* a.checkpoint
      for (let i = 5; i < 9; i++) yield* j.append(S, [note(i)])
      yield* j.append(S, [note(9)], {
        createRun: {
          id: RUN,
          sessionId: S,
          principal: "alice",
          state: "Accepted",
          input: "deploy to staging",
          startSeq: 10,
          error: null,
          createdAt: 1,
          updatedAt: 1
        }
      })
    })
  )

/** Offline, read-only: the plain verify and the anchor check. */
const check = (f: Files, keyFile = f.keyFile) =>
  Effect.scoped(
    Effect.flatMap(SqliteJournal.make({ filename: f.filename, readonly: true }), (j) =>
      Effect.all({ plain: j.verify, anchor: Anchor.verify(j, { witnessFile: f.witnessFile, keyFile }) })
    )
  )
const lines = (f: Files) => readFileSync(f.witnessFile, "utf8").split("\n").filter(Boolean)

describe("Anchor", () => {
  it.live("a clean journal with anchors verifies; the key is 0600 with a .pub beside it; every anchor is logged", () =>
    Effect.gen(function* () {
      const f = files()
      const logged: Array<string> = []
      const capture = Logger.make(({ message, annotations }) => {
        const text = Array.isArray(message) ? message.join(" ") : String(message)
        if (text === "journal anchored") logged.push(String(Option.getOrNull(HashMap.get(annotations, "anchor"))))
      })
      yield* seed(f).pipe(Effect.provide(Logger.add(capture)))
      // At start (empty journal), the explicit checkpoint, and at close.
      const witness = lines(f)
      assert.strictEqual(witness.length, 3)
      assert.deepStrictEqual(logged, witness) // the log carries each line: a second witness
      assert.deepInclude(JSON.parse(witness[2]!), { v: 1, count: 10, records: 2 })
      assert.strictEqual(statSync(f.keyFile).mode & 0o777, 0o600)
      assert.isTrue(existsSync(`${f.keyFile}.pub`))
      const r = yield* check(f)
      assert.deepStrictEqual(r.plain, { ok: true, checked: 10 })
      assert.deepInclude(r.anchor, { ok: true, anchors: 3, notes: [] })
      // The public half alone is enough to verify.
      assert.deepInclude((yield* check(f, `${f.keyFile}.pub`)).anchor, { ok: true, anchors: 3 })
    })
  )

  it.live("anchors periodically, only when the heads moved", () =>
    Effect.gen(function* () {
      const f = files()
      const counts = yield* anchored(
        f,
        (j, a) =>
          Effect.gen(function* () {
            yield* j.createSession(Records.makeSession({ id: S, principal: "alice" }))
            yield* j.append(S, [note(0)])
            // The periodic fiber picks the new head up. (A period may also fall between the session's
            // commit and the append's, which the writer thread answers separately: one more anchor.)
            yield* Effect.sync(() => lines(f).length).pipe(
              Effect.repeat({ schedule: Schedule.spaced("20 millis"), until: (k) => k >= 2 })
            )
            yield* Effect.sleep("100 millis") // the head the append left is anchored by now
            const settled = lines(f).length
            yield* Effect.sleep("200 millis") // several more periods, nothing new
            const unchanged = lines(f).length
            const again = yield* a.checkpoint
            return { settled, unchanged, again: Option.isNone(again) }
          }),
        "30 millis"
      )
      assert.oneOf(counts.settled, [2, 3])
      assert.deepStrictEqual(counts, { settled: counts.settled, unchanged: counts.settled, again: true })
      assert.strictEqual(lines(f).length, counts.settled) // nothing new at close either
      assert.deepInclude((yield* check(f)).anchor, { ok: true, anchors: counts.settled })
    })
  )

  it.live("truncating the tail and rewriting chain_head passes plain verify, but the anchor names it", () =>
    Effect.gen(function* () {
      const f = files()
      yield* seed(f)
      const db = new Database(f.filename)
      const last = db.prepare("SELECT * FROM tape_events WHERE chain_seq = 7").get() as { hash: string }
      db.prepare("DELETE FROM tape_events WHERE chain_seq > 7").run()
      db.prepare("UPDATE chain_head SET chain_seq = 7, count = 7, hash = ?").run(last.hash)
      db.close()
      const r = yield* check(f)
      assert.deepStrictEqual(r.plain, { ok: true, checked: 7 })
      assert.deepInclude(r.anchor, { ok: false, reason: "truncated", line: 3 })
      assert.match(
        r.anchor.ok ? "" : r.anchor.detail,
        /^truncated: the anchor at \d{4}-\d\d-\d\dT[\d:.]+Z saw 10 rows with head [0-9a-f]{64}; the file has 7$/
      )
    })
  )

  it.live(
    "rewriting a stored record and re-chaining its version in place passes plain verify, but the anchor names it",
    () =>
      Effect.gen(function* () {
        const f = files()
        yield* seed(f)
        const db = new Database(f.filename)
        db.prepare(`UPDATE runs SET input = 'deploy to production' WHERE id = '${RUN}'`).run()
        const v = db.prepare("SELECT * FROM record_versions WHERE tbl = 'runs'").get() as {
          seq: number
          prev_hash: string
        }
        const version = versionOf("runs", db.prepare("SELECT * FROM runs").get() as Record<string, unknown>)
        const hash = versionHash(v.prev_hash, v.seq, "runs", RUN, version)
        db.prepare("UPDATE record_versions SET digest = ?, hints = ?, hash = ? WHERE seq = ?").run(
          version.digest,
          version.hints,
          hash,
          v.seq
        )
        db.prepare("UPDATE chain_head SET records_hash = ?").run(hash)
        db.close()
        const r = yield* check(f)
        assert.deepStrictEqual(r.plain, { ok: true, checked: 10 })
        assert.deepInclude(r.anchor, { ok: false, reason: "rewritten", line: 3 })
        assert.match(
          r.anchor.ok ? "" : r.anchor.detail,
          /^rewritten: record version 2 has hash [0-9a-f]{64}, but the anchor at/
        )
      })
  )

  it.live("a forged witness line is named: a changed field, another key, or not a witness line at all", () =>
    Effect.gen(function* () {
      const f = files()
      yield* seed(f)
      const original = readFileSync(f.witnessFile, "utf8")
      const [, , last] = lines(f)

      // Claim fewer rows than were anchored, keeping the signature.
      const bumped = { ...JSON.parse(last!), count: 7 }
      appendFileSync(f.witnessFile, `${JSON.stringify(bumped)}\n`)
      const r1 = yield* check(f)
      assert.deepInclude(r1.anchor, { ok: false, reason: "forged", line: 4 })
      assert.match(
        r1.anchor.ok ? "" : r1.anchor.detail,
        /^line 4: the signature does not verify with key [0-9a-f]{32}$/
      )

      // A well-formed line signed by the attacker's own key.
      writeFileSync(f.witnessFile, original)
      const mallory = generateKeyPairSync("ed25519")
      const unsigned = { ...JSON.parse(last!), keyId: "f".repeat(32) }
      delete unsigned.sig
      const body = `palyra-anchor/v1\n${Canonical.canonicalJson(unsigned)}`
      const sig = sign(null, Buffer.from(body), mallory.privateKey).toString("base64")
      appendFileSync(f.witnessFile, `${JSON.stringify({ ...unsigned, sig })}\n`)
      const r2 = yield* check(f)
      assert.deepInclude(r2.anchor, { ok: false, reason: "forged", line: 4 })
      assert.match(r2.anchor.ok ? "" : r2.anchor.detail, /signed by key f{32}, not by the given key/)

      writeFileSync(f.witnessFile, `${original}{"v":1,"count":"ten"}\n`)
      assert.deepInclude((yield* check(f)).anchor, { ok: false, reason: "malformed", line: 4 })

      // And an empty witness for a journal with rows is no proof of anything.
      writeFileSync(f.witnessFile, "")
      assert.deepInclude((yield* check(f)).anchor, { ok: false, reason: "unanchored" })
    })
  )

  it.live(
    "start-up refuses a journal that no longer holds its newest anchor, a missing key, a key readable by others",
    () =>
      Effect.gen(function* () {
        const f = files()
        yield* seed(f)
        const db = new Database(f.filename)
        const last = db.prepare("SELECT * FROM tape_events WHERE chain_seq = 9").get() as { hash: string }
        db.prepare("DELETE FROM tape_events WHERE chain_seq > 9").run()
        db.prepare("UPDATE chain_head SET chain_seq = 9, count = 9, hash = ?").run(last.hash)
        db.close()
        const before = readFileSync(f.witnessFile, "utf8")
        const truncated = yield* anchored(f, () => Effect.void).pipe(Effect.flip)
        assert.strictEqual(truncated._tag, "JournalError")
        assert.match(
          truncated.message,
          /the journal no longer matches its last anchor: truncated: the anchor at .* saw 10 rows/
        )
        assert.strictEqual(readFileSync(f.witnessFile, "utf8"), before) // it signed nothing

        const g = files()
        yield* seed(g)
        rmSync(g.keyFile)
        const noKey = yield* anchored(g, () => Effect.void).pipe(Effect.flip)
        assert.match(noKey.message, /holds anchors, but the key file .* is missing/)
        assert.isFalse(existsSync(g.keyFile)) // no new key was made to sign a new history

        const h = files()
        yield* seed(h)
        chmodSync(h.keyFile, 0o644)
        const open = yield* anchored(h, () => Effect.void).pipe(Effect.flip)
        assert.match(open.message, /readable or writable by others \(mode 644\)/)
      })
  )

  it.live("a torn last line (a crash mid-append) is ignored by verify and cut at the next start", () =>
    Effect.gen(function* () {
      const f = files()
      yield* seed(f)
      appendFileSync(f.witnessFile, '{"v":1,"at":"2026-')
      const r = yield* check(f)
      assert.deepInclude(r.anchor, { ok: true, anchors: 3 })
      assert.match(r.anchor.ok ? r.anchor.notes.join() : "", /line 4 is unterminated/)
      yield* anchored(f, (j) => j.append(S, [note(10)]))
      assert.strictEqual(lines(f).length, 4) // torn bytes gone, one new anchor
      assert.deepInclude((yield* check(f)).anchor, { ok: true, anchors: 4, notes: [] })
    })
  )

  it.live("rows written after the newest anchor are reported as not covered", () =>
    Effect.gen(function* () {
      const f = files()
      yield* seed(f)
      // Appended by a process that was not anchoring (e.g. the anchor layer not mounted).
      yield* Effect.scoped(
        Effect.flatMap(SqliteJournal.make({ filename: f.filename }), (j) => j.append(S, [note(10), note(11)]))
      )
      const r = yield* check(f)
      assert.deepInclude(r.anchor, { ok: true, anchors: 3 })
      assert.match(
        r.anchor.ok ? r.anchor.notes.join() : "",
        /^2 rows and 0 record versions were written after the newest anchor/
      )
    })
  )
})
