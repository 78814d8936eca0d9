// Stored records (sessions, runs, approvals) are verifiable: an attacker edits the file with a second
// better-sqlite3 connection, and `verify` names the table, the row and the column.
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { type Journal, Records } from "@palyra/core"
import Database from "better-sqlite3"
import { Effect } from "effect"
import { SqliteJournal } from "../src/index.js"
import { versionHash, versionOf } from "../src/internal/records.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-integrity-"))
let n = 0
const S = "01KA0000000000000000000SES" as never
const DONE = "01KA0000000000000000000RUN" as never
const QUEUED = "01KA000000000000000000QUED" as never
const GRANT = "01KA0000000000000000000APR" as never
const DENIED = "01KA00000000000000000000DN" as never

const run = (id: never, input: string, startSeq: number): Records.Run => ({
  id,
  sessionId: S,
  principal: "alice",
  state: "Pending",
  input,
  startSeq,
  error: null,
  createdAt: 10,
  updatedAt: 10
})
const approval = (id: never) =>
  Records.makeApproval({
    id,
    sessionId: S,
    runId: DONE,
    toolCallId: "01KA00000000000000000000TC" as never,
    principal: "alice",
    tool: "fs.write",
    argsDigest: "d".repeat(64),
    risk: "sensitive",
    summary: "fs.write a.txt",
    requestedAt: 20,
    expiresAt: 10_000
  })
const changed = (runId: never, at: number, from: Records.Run["state"], to: Records.Run["state"]) => ({
  _tag: "RunStateChanged" as const,
  sessionId: S,
  runId,
  at,
  from,
  to,
  reason: "test"
})

/**
 * A journal as the kernel leaves it: a run that waited for approval and finished, a standing grant
 * that was resolved, used and (for the second approval) denied — those writes append nothing in
 * their own transaction — and a queued run whose input is on no tape event yet.
 */
const seed = (j: Journal.Service) =>
  Effect.gen(function* () {
    yield* j.createSession(Records.makeSession({ id: S, principal: "alice", title: "t" }))
    yield* j.updateSession(Records.makeSession({ id: S, principal: "alice", title: "renamed", updatedAt: 5 }))
    yield* j.append(S, [changed(DONE, 10, "Pending", "Accepted")], {
      createRun: run(DONE, "write a.txt", 1),
      runTransition: { runId: DONE, from: "Pending", to: "Accepted" }
    })
    yield* j.append(
      S,
      [
        { _tag: "UserMessage", sessionId: S, runId: DONE, at: 11, text: "write a.txt" },
        changed(DONE, 11, "Accepted", "InProgress")
      ],
      { runTransition: { runId: DONE, from: "Accepted", to: "InProgress" } }
    )
    yield* j.append(S, [changed(DONE, 20, "InProgress", "WaitingForApproval")], {
      createApproval: approval(GRANT),
      runTransition: { runId: DONE, from: "InProgress", to: "WaitingForApproval" }
    })
    // A Conflict after the run's transition (and its version) were written: all of it rolls back.
    const conflict = yield* j
      .append(S, [changed(DONE, 21, "WaitingForApproval", "InProgress")], {
        runTransition: { runId: DONE, from: "WaitingForApproval", to: "InProgress" },
        createApproval: approval(GRANT)
      })
      .pipe(Effect.flip)
    assert.strictEqual(conflict._tag, "Conflict")
    yield* j.resolveApproval(GRANT, {
      status: "approved",
      scope: "session",
      resolver: "bob",
      reason: "ok",
      resolvedAt: 21
    })
    yield* j.append(S, [changed(DONE, 22, "WaitingForApproval", "InProgress")], {
      runTransition: { runId: DONE, from: "WaitingForApproval", to: "InProgress" }
    })
    yield* j.useGrant(GRANT, 23)
    yield* j.append(S, [changed(DONE, 24, "InProgress", "Failed")], {
      createApproval: approval(DENIED),
      runTransition: { runId: DONE, from: "InProgress", to: "Failed", error: { code: "tool_error", message: "boom" } }
    })
    yield* j.resolveApproval(DENIED, { status: "denied", scope: "once", resolver: "bob", reason: "no", resolvedAt: 25 })
    yield* j.append(
      S,
      [{ _tag: "RunAccepted", sessionId: S, runId: QUEUED, at: 30, principal: "alice", queuedBehind: null }],
      {
        createRun: run(QUEUED, "deploy to production", 8),
        runTransition: { runId: QUEUED, from: "Pending", to: "Accepted" }
      }
    )
  })

const seeded = () =>
  Effect.gen(function* () {
    const filename = join(dir, `j${n++}.db`)
    yield* Effect.scoped(Effect.flatMap(SqliteJournal.make({ filename }), seed))
    return filename
  })
const verifyFile = (filename: string) =>
  Effect.scoped(Effect.flatMap(SqliteJournal.make({ filename }), (j) => j.verify))
/** Tamper with the file the way an attacker would: another connection, plain SQL. */
const tamper = (filename: string, ...statements: Array<string>) =>
  Effect.sync(() => {
    const db = new Database(filename)
    for (const s of statements) db.prepare(s).run()
    db.close()
  })

describe("stored records are verifiable", () => {
  it.live("a journal written through every path (appends, resolutions, grant use, a rolled-back append) verifies", () =>
    Effect.gen(function* () {
      const f = yield* seeded()
      assert.deepStrictEqual(yield* verifyFile(f), { ok: true, checked: 7 })
      const db = new Database(f, { readonly: true })
      const versions = db.prepare("SELECT tbl, row_id FROM record_versions ORDER BY seq").all()
      const status = db.prepare("SELECT status, grant_uses FROM approvals WHERE id = ?").get(GRANT)
      db.close()
      // One version per write of a row; nothing from the rolled-back append.
      assert.deepStrictEqual(versions, [
        { tbl: "sessions", row_id: S },
        { tbl: "sessions", row_id: S },
        { tbl: "runs", row_id: DONE },
        { tbl: "runs", row_id: DONE },
        { tbl: "runs", row_id: DONE },
        { tbl: "approvals", row_id: GRANT },
        { tbl: "approvals", row_id: GRANT },
        { tbl: "runs", row_id: DONE },
        { tbl: "approvals", row_id: GRANT },
        { tbl: "runs", row_id: DONE },
        { tbl: "approvals", row_id: DENIED },
        { tbl: "approvals", row_id: DENIED },
        { tbl: "runs", row_id: QUEUED }
      ])
      assert.deepStrictEqual(status, { status: "approved", grant_uses: 1 })
    })
  )

  it.live("editing a queued run's input (on no tape event yet) is named: runs, id, input", () =>
    Effect.gen(function* () {
      const f = yield* seeded()
      yield* tamper(f, `UPDATE runs SET input = 'rm -rf /' WHERE id = '${QUEUED}'`)
      const r = yield* verifyFile(f)
      assert.deepInclude(r, { ok: false, reason: "row_edited", row: { table: "runs", id: QUEUED, columns: ["input"] } })
      assert.match(r.ok ? "" : r.detail, new RegExp(`^runs ${QUEUED}: input differs from its last recorded version`))
    })
  )

  it.live("editing a run's state is named: runs, id, state", () =>
    Effect.gen(function* () {
      const f = yield* seeded()
      yield* tamper(f, `UPDATE runs SET state = 'Done', error_code = NULL WHERE id = '${DONE}'`)
      const r = yield* verifyFile(f)
      assert.deepInclude(r, {
        ok: false,
        reason: "row_edited",
        row: { table: "runs", id: DONE, columns: ["state", "error_code"] }
      })
      assert.match(r.ok ? "" : r.detail, /state, error_code differ/)
    })
  )

  it.live("editing an approval's status (denied → approved) is named: approvals, id, status", () =>
    Effect.gen(function* () {
      const f = yield* seeded()
      yield* tamper(f, `UPDATE approvals SET status = 'approved' WHERE id = '${DENIED}'`)
      assert.deepInclude(yield* verifyFile(f), {
        ok: false,
        reason: "row_edited",
        row: { table: "approvals", id: DENIED, columns: ["status"] }
      })
    })
  )

  it.live("resetting a grant's use counter and taking over a session are named", () =>
    Effect.gen(function* () {
      const f = yield* seeded()
      yield* tamper(f, `UPDATE approvals SET grant_uses = 0 WHERE id = '${GRANT}'`)
      assert.deepInclude(yield* verifyFile(f), { row: { table: "approvals", id: GRANT, columns: ["grant_uses"] } })
      const g = yield* seeded()
      yield* tamper(g, `UPDATE sessions SET principal = 'mallory' WHERE id = '${S}'`)
      assert.deepInclude(yield* verifyFile(g), { row: { table: "sessions", id: S, columns: ["principal"] } })
    })
  )

  it.live("deleting an approval row, or inserting a run the journal never wrote, is named", () =>
    Effect.gen(function* () {
      const f = yield* seeded()
      yield* tamper(f, `DELETE FROM approvals WHERE id = '${DENIED}'`)
      assert.deepInclude(yield* verifyFile(f), {
        ok: false,
        reason: "row_deleted",
        row: { table: "approvals", id: DENIED, columns: [] }
      })
      const g = yield* seeded()
      yield* tamper(
        g,
        `INSERT INTO runs (id, session_id, principal, state, input, start_seq, created_at, updated_at)
         VALUES ('01KA0000000000000000000EVL', '${S}', 'alice', 'Done', 'x', 99, 1, 1)`
      )
      assert.deepInclude(yield* verifyFile(g), {
        ok: false,
        reason: "row_inserted",
        row: { table: "runs", id: "01KA0000000000000000000EVL", columns: [] }
      })
    })
  )

  it.live("editing a record version itself, or removing the newest versions, breaks the record chain", () =>
    Effect.gen(function* () {
      const f = yield* seeded()
      yield* tamper(f, "UPDATE record_versions SET hints = replace(hints, 'a', 'b') WHERE seq = 4")
      const r = yield* verifyFile(f)
      assert.deepInclude(r, { ok: false, reason: "edited" })
      assert.match(r.ok ? "" : r.detail, /^record version 4 \(runs /)

      const g = yield* seeded()
      yield* tamper(g, "DELETE FROM record_versions WHERE seq > 11")
      const t = yield* verifyFile(g)
      assert.deepInclude(t, { ok: false, reason: "truncated" })
      assert.match(t.ok ? "" : t.detail, /records 13 record versions; only 11 are present/)
    })
  )

  it.live(
    "re-signing an edited row's version in place, with the chain head rewritten, passes plain verify (the anchor's job)",
    () =>
      Effect.gen(function* () {
        // Documents the limit: SHA-256 is no secret. See anchor.test.ts for the same attack caught.
        const f = yield* seeded()
        const db = new Database(f)
        db.prepare(`UPDATE runs SET input = 'deploy to staging' WHERE id = '${QUEUED}'`).run()
        const last = db.prepare("SELECT * FROM record_versions ORDER BY seq DESC LIMIT 1").get() as {
          seq: number
          prev_hash: string
        }
        const row = db.prepare("SELECT * FROM runs WHERE id = ?").get(QUEUED) as Record<string, unknown>
        const version = versionOf("runs", row)
        const hash = versionHash(last.prev_hash, last.seq, "runs", QUEUED, version)
        db.prepare("UPDATE record_versions SET digest = ?, hints = ?, hash = ? WHERE seq = ?").run(
          version.digest,
          version.hints,
          hash,
          last.seq
        )
        db.prepare("UPDATE chain_head SET records_hash = ?").run(hash)
        db.close()
        assert.deepStrictEqual(yield* verifyFile(f), { ok: true, checked: 7 })
      })
  )

  it.live("a read-only open verifies without writing, and refuses writes with a typed error", () =>
    Effect.gen(function* () {
      const f = yield* seeded()
      const result = yield* Effect.scoped(
        Effect.gen(function* () {
          const j = yield* SqliteJournal.make({ filename: f, readonly: true })
          const verify = yield* j.verify
          const write = yield* j
            .resolveApproval(GRANT, {
              status: "denied",
              scope: "once",
              resolver: "x",
              reason: "x",
              resolvedAt: 1
            })
            .pipe(Effect.flip)
          return { verify, write }
        })
      )
      assert.deepStrictEqual(result.verify, { ok: true, checked: 7 })
      assert.strictEqual(result.write._tag, "JournalError")
      const append = yield* Effect.scoped(
        Effect.flatMap(SqliteJournal.make({ filename: f, readonly: true }), (j) =>
          j
            .append(S, [{ _tag: "SessionNote", sessionId: S, runId: null, at: 1, author: "x", text: "x" }])
            .pipe(Effect.flip)
        )
      )
      assert.strictEqual(append._tag, "JournalError")
      assert.deepStrictEqual(yield* verifyFile(f), { ok: true, checked: 7 })
    })
  )

  it.live("a read-only open of a file that is not a journal fails with a typed error", () =>
    Effect.gen(function* () {
      const f = join(dir, "not-a-journal.db")
      const db = new Database(f)
      db.exec("CREATE TABLE t (x)")
      db.close()
      const error = yield* Effect.scoped(SqliteJournal.make({ filename: f, readonly: true })).pipe(Effect.flip)
      assert.strictEqual(error._tag, "JournalError")
      assert.match(error.message, /not a Palyra journal/)
    })
  )
})
