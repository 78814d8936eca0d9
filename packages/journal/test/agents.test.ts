/**
 * Sessions bound to agents on a real SQLite file: migration 0007 (`agent_id`, covered by the record
 * chain) on a file written before it, and the column's round trip and tamper evidence afterwards.
 */
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Caller, Canonical, Gateway, ScriptedModel } from "@palyra/core"
import { gatewayLayer } from "@palyra/core/testing"
import Database from "better-sqlite3"
import { Effect, type Layer, Option } from "effect"
import { SqliteJournal } from "../src/index.js"
import { migrations } from "../src/internal/migrations.js"
import { digestOver, versionHash } from "../src/internal/records.js"
import { makeSqlClient } from "../src/internal/sqlClient.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-agents-"))

// The session columns the record chain covered before 0007.
const BEFORE = [
  "id",
  "principal",
  "key",
  "key_digest",
  "channel",
  "title",
  "parent_id",
  "parent_seq",
  "reset_generation",
  "history_from_seq",
  "archived",
  "created_at"
]

/** Insert a session row and version it the way the journal did before 0007. */
const oldSession = (db: Database.Database, id: string, title: string) => {
  db.prepare("INSERT INTO sessions (id, principal, title, created_at, updated_at) VALUES (?, 'old', ?, 1, 1)").run(
    id,
    title
  )
  const row = db.prepare("SELECT * FROM sessions WHERE id = ?").get(id) as Record<string, unknown>
  const head = db.prepare("SELECT records_seq AS seq, records_hash AS hash FROM chain_head WHERE id = 1").get() as {
    seq: number
    hash: string
  }
  const hints = BEFORE.map((c) => Canonical.sha256(Canonical.canonicalJson(row[c] ?? null)).slice(0, 8)).join("")
  const version = { digest: digestOver(BEFORE, row), hints }
  const seq = head.seq + 1
  const hash = versionHash(head.hash, seq, "sessions", id, version)
  db.prepare(
    "INSERT INTO record_versions (seq, tbl, row_id, digest, hints, prev_hash, hash) VALUES (?, 'sessions', ?, ?, ?, ?, ?)"
  ).run(seq, id, version.digest, version.hints, head.hash, hash)
  db.prepare("UPDATE chain_head SET records_seq = ?, records_hash = ? WHERE id = 1").run(seq, hash)
}

const CLEAN = "01KA00000000000000000000C1"
const EDITED = "01KA00000000000000000000E1"

const versionsOf = (filename: string, id: string) => {
  const db = new Database(filename, { readonly: true })
  const n = (db.prepare("SELECT count(*) AS n FROM record_versions WHERE row_id = ?").get(id) as { n: number }).n
  db.close()
  return n
}

describe("sessions and agents on SQLite", () => {
  it.live("0007: older sessions become the default agent's and still verify; a row edited before is not blessed", () =>
    Effect.gen(function* () {
      const filename = join(dir, "before-agents.db")
      const db = new Database(filename)
      yield* Effect.gen(function* () {
        const sql = yield* makeSqlClient(db)
        const upTo5 = Object.fromEntries(Object.entries(migrations).filter(([id]) => id < "0006"))
        yield* Migrator.make({})({ loader: Migrator.fromRecord(upTo5), table: "palyra_migrations" }).pipe(
          Effect.provideService(SqlClient.SqlClient, sql)
        )
      })
      oldSession(db, CLEAN, "kept")
      oldSession(db, EDITED, "original")
      // Tampering before the upgrade: the row no longer matches its version.
      db.prepare("UPDATE sessions SET title = 'forged' WHERE id = ?").run(EDITED)
      db.close()

      const opened = yield* Effect.scoped(
        Effect.gen(function* () {
          const journal = yield* SqliteJournal.make({ filename })
          return { session: yield* journal.getSession(CLEAN as never), verify: yield* journal.verify }
        })
      )
      assert.strictEqual(Option.getOrThrow(opened.session).agentId, "default")
      // The clean row got a version with the new column; the edited one did not, and is still named.
      assert.strictEqual(versionsOf(filename, CLEAN), 2)
      assert.strictEqual(versionsOf(filename, EDITED), 1)
      assert.deepInclude(opened.verify, { ok: false, reason: "row_edited" })
      assert.strictEqual(opened.verify.ok ? undefined : opened.verify.row?.id, EDITED)
      assert.include(opened.verify.ok ? [] : (opened.verify.row?.columns ?? []), "title")

      // Once the forged row is put back as it was, the whole file verifies.
      const fix = new Database(filename)
      fix.prepare("UPDATE sessions SET title = 'original' WHERE id = ?").run(EDITED)
      fix.close()
      const again = yield* Effect.scoped(Effect.flatMap(SqliteJournal.make({ filename }), (j) => j.verify))
      // The restored row matches its pre-0007 version under the old columns only: named by its new column.
      assert.deepInclude(again, { ok: false, reason: "row_edited" })
      assert.deepStrictEqual(again.ok ? [] : again.row?.columns, ["agent_id"])
    })
  )

  it.live("a session's agent survives reopening, and editing it on disk is named by verify", () =>
    Effect.gen(function* () {
      const filename = join(dir, "agents.db")
      const model = ScriptedModel.make(() => ({ text: "ok" }), { name: "m" })
      const kernel = () =>
        gatewayLayer({
          model,
          agents: [{ id: "support" }, { id: "ops" }],
          journal: SqliteJournal.layer({ filename })
        }) as Layer.Layer<Gateway.Gateway>
      const alice = Caller.user("alice")
      const created = yield* Effect.flatMap(Gateway.Gateway, (g) =>
        g.resolveSession(alice, { key: "desk", agent: "support" })
      ).pipe(Effect.provide(kernel()), Effect.scoped)
      const reopened = yield* Effect.flatMap(Gateway.Gateway, (g) =>
        Effect.gen(function* () {
          const found = yield* g.resolveSession(alice, { key: "desk" })
          const conflict = yield* Effect.flip(g.resolveSession(alice, { key: "desk", agent: "ops" }))
          return { found, conflict }
        })
      ).pipe(Effect.provide(kernel()), Effect.scoped)
      assert.strictEqual(reopened.found.id, created.id)
      assert.strictEqual(reopened.found.agentId, "support")
      assert.strictEqual(reopened.conflict._tag, "Conflict")

      const verify = () => Effect.scoped(Effect.flatMap(SqliteJournal.make({ filename }), (j) => j.verify))
      assert.isTrue((yield* verify()).ok)
      const attacker = new Database(filename)
      attacker.prepare("UPDATE sessions SET agent_id = 'ops' WHERE id = ?").run(created.id)
      attacker.close()
      assert.deepInclude(yield* verify(), {
        ok: false,
        reason: "row_edited",
        row: { table: "sessions", id: created.id, columns: ["agent_id"] }
      })
    })
  )
})
