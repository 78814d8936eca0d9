import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { type Ids, type Journal, MemoryJournal, Records, Redaction, type TapeEvent } from "@palyra/core"
import Database from "better-sqlite3"
import { Effect, Option, type Scope } from "effect"
import { SqliteJournal } from "../src/index.js"
import { migrations } from "../src/internal/migrations.js"
import { makeSqlClient } from "../src/internal/sqlClient.js"
import { diskBytes, secretsOnDisk } from "./diskBytes.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-redaction-"))

const SID = "01KA000000000000000000000A" as Ids.SessionId
const SID2 = "01KA000000000000000000000B" as Ids.SessionId
const RID = "01KA000000000000000000000R" as Ids.RunId
const TCID = "01KA000000000000000000000T" as Ids.ToolCallId
const AID = "01KA000000000000000000000P" as Ids.ApprovalId

/** Every secret below; none may reach the files, in whole or in part. */
const S = {
  sessionKey: "ghp_q7Z0xv1nW8cR2yT5bK9mL3pA6sD4fG0hJ8kE",
  otherKey: "ghp_Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp9Oo8N",
  titleToken: "Qm9vTXlLZXkxMjM0NTY3ODkwYWJjZGVmZ2hpamts",
  channelToken: "xoxb-882731992-4471829931-Qz8wVb5Rt2Ly",
  input: "Hunter2-Sup3rSecret-Passw0rd",
  runError: "sk-proj-Yk4Lm9Np2Qr7St1Uv6Wx3Yz8Ab5Cd0Ef",
  deep: "AKIAZ7Q4WX8RT2LM9KP3",
  deepPassword: "d33p-n3st3d-pa55w0rd-value",
  pemLine: "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7Yk2",
  summaryPass: "s3cretPassw0rd-in-url",
  reasonJwt:
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
  resolverBasic: "YWRtaW46aHVudGVyMjAyNA==",
  revokerToken: "glpat-Xw8Rt5Ly2Qz9Vb3Nm6Kp",
  newTitle: "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
  literal: "palyra-admin-Tk-0x7f3e9a1c55d2",
  streamedKey: "sk-proj-jN4HFNn8q2WcR5tY8uI1oP4aS7dF0gH3"
} as const
const SECRETS = Object.values(S)

/** An object nested `depth` levels deep around `leaf`, built without recursion. */
const nest = (depth: number, leaf: unknown) => {
  let v: unknown = leaf
  for (let i = 0; i < depth; i++) v = i % 2 === 0 ? { next: v } : [v]
  return v
}

const ev = <E extends TapeEvent.NewTapeEvent>(e: E): E => e

/** Write one session's worth of everything the journal stores, each field carrying a secret. */
const writeEverything = (j: Journal.Service) =>
  Effect.gen(function* () {
    yield* j.createSession(
      Records.makeSession({
        id: SID,
        principal: "alice",
        key: S.sessionKey,
        title: `debugging with authorization: bearer ${S.titleToken}`,
        channel: `slack ${S.channelToken}`
      })
    )
    const base = { sessionId: SID, runId: RID, at: 10 }
    const run: Records.Run = {
      id: RID,
      sessionId: SID,
      principal: "alice",
      state: "Pending",
      input: `log in with password=${S.input}`,
      startSeq: 1,
      error: null,
      createdAt: 10,
      updatedAt: 10
    }
    yield* j.append(
      SID,
      [
        ev({ _tag: "RunAccepted", ...base, principal: "alice", queuedBehind: null }),
        ev({ _tag: "UserMessage", ...base, text: `log in with password=${S.input}` })
      ],
      { createRun: run, runTransition: { runId: RID, from: "Pending", to: "Accepted" } }
    )
    // A key streamed in two pieces ~150 ms apart, coalesced through the streaming redactor.
    const stream = Redaction.streaming(Redaction.make({ literals: [S.literal] }))
    const pieces = [
      stream.push(`Your key is …${S.streamedKey.slice(0, 12)}`),
      stream.push(`${S.streamedKey.slice(12)} — keep it safe.`),
      stream.flush()
    ].filter((text) => text.length > 0)
    for (const text of pieces) yield* j.append(SID, [ev({ _tag: "AssistantDelta", ...base, turn: 1, text })])
    const args = {
      url: "https://example.com",
      deep: nest(100_000, { note: `aws ${S.deep}`, password: S.deepPassword })
    }
    const summary = `fetch https://admin:${S.summaryPass}@example.com/x`
    yield* j.append(
      SID,
      [
        ev({
          _tag: "ToolProposed",
          ...base,
          toolCallId: TCID,
          providerCallId: "call_1",
          tool: "http.fetch",
          args,
          argsDigest: "d".repeat(64)
        }),
        ev({
          _tag: "ApprovalRequested",
          ...base,
          approvalId: AID,
          toolCallId: TCID,
          tool: "http.fetch",
          risk: "sensitive",
          argsDigest: "d".repeat(64),
          summary,
          expiresAt: 1_000
        })
      ],
      {
        createApproval: Records.makeApproval({
          id: AID,
          sessionId: SID,
          runId: RID,
          toolCallId: TCID,
          principal: "alice",
          tool: "http.fetch",
          argsDigest: "d".repeat(64),
          risk: "sensitive",
          summary,
          requestedAt: 10,
          expiresAt: 1_000
        })
      }
    )
    yield* j.resolveApproval(AID, {
      status: "approved",
      scope: "session",
      resolver: `operator (Basic ${S.resolverBasic})`,
      reason: `fine, the token is ${S.reasonJwt}`,
      resolvedAt: 20
    })
    yield* j.revokeGrant(AID, `bot token: ${S.revokerToken}`, 30)
    yield* j.append(SID, [
      ev({
        _tag: "ToolResult",
        ...base,
        toolCallId: TCID,
        tool: "http.fetch",
        status: "ok",
        output: `-----BEGIN RSA PRIVATE KEY-----\n${S.pemLine}\n-----END RSA PRIVATE KEY-----`,
        truncated: false,
        durationMs: 3
      }),
      ev({ _tag: "SessionNote", sessionId: SID, runId: null, at: 11, author: "ops", text: `admin is ${S.literal}` })
    ])
    yield* j.append(
      SID,
      [
        ev({ _tag: "RunError", ...base, code: "provider_error", message: `invalid key ${S.runError}` }),
        ev({ _tag: "RunStateChanged", ...base, from: "Accepted", to: "Failed", reason: `invalid key ${S.runError}` })
      ],
      {
        runTransition: {
          runId: RID,
          from: "Accepted",
          to: "Failed",
          error: { code: "provider_error", message: `invalid key ${S.runError}` }
        }
      }
    )
    // Renaming a session read back (its key is the redacted text) keeps it findable by the raw key.
    const stored = Option.getOrThrow(yield* j.getSession(SID))
    yield* j.updateSession({ ...stored, title: `now with ${S.newTitle}`, updatedAt: 40 })
  })

/** Everything a client can read back (`GET /v1/sessions/:id/tape`, sessions, runs, approvals). */
const readEverything = (j: Journal.Service) =>
  Effect.gen(function* () {
    return JSON.stringify([
      yield* j.readTape(SID, { afterSeq: 0 }),
      yield* j.listSessions({ includeArchived: true }),
      yield* j.listRuns({}),
      yield* j.listApprovals({})
    ])
  })

const leaked = (text: string) => SECRETS.filter((s) => text.includes(s.slice(0, 12)) || text.includes(s.slice(-12)))

describe("redaction on disk", () => {
  it.live(
    "sessions, runs, events (nested 100,000 deep, streamed in pieces) and approvals: no secret in any byte of the DB, WAL or SHM; the secret session key still finds its session",
    () =>
      Effect.gen(function* () {
        const filename = join(dir, "everything.db")
        const open = SqliteJournal.make({ filename, redaction: { literals: [S.literal] } })
        yield* Effect.scoped(
          Effect.gen(function* () {
            const j = yield* open
            yield* writeEverything(j)
            // While open: the WAL holds the new pages.
            assert.isAbove(diskBytes(`${filename}`).length, 0)
            assert.deepStrictEqual(secretsOnDisk(filename, SECRETS), [])
            assert.deepStrictEqual(leaked(yield* readEverything(j)), [])

            const found = yield* j.findSessionByKey("alice", S.sessionKey)
            assert.strictEqual(Option.getOrThrow(found).id, SID)
            assert.strictEqual(Option.getOrThrow(found).key, "[REDACTED:github-token]")
            assert.include(Option.getOrThrow(found).title ?? "", "[REDACTED:huggingface-token]")
            // The display text is not a key, and a key is per principal.
            assert.isTrue(Option.isNone(yield* j.findSessionByKey("alice", "[REDACTED:github-token]")))
            assert.isTrue(Option.isNone(yield* j.findSessionByKey("bob", S.sessionKey)))
            // A second secret key that redacts to the same text is a different session, not a conflict.
            yield* j.createSession(Records.makeSession({ id: SID2, principal: "alice", key: S.otherKey }))
            assert.strictEqual(Option.getOrThrow(yield* j.findSessionByKey("alice", S.otherKey)).id, SID2)
            const dup = yield* Effect.flip(
              j.createSession(
                Records.makeSession({
                  id: "01KA000000000000000000000C" as never,
                  principal: "alice",
                  key: S.sessionKey
                })
              )
            )
            assert.strictEqual(dup._tag, "Conflict")
            assert.notInclude(dup.message, S.sessionKey)

            const tape = yield* j.readTape(SID, { afterSeq: 0 })
            const deltas = tape.flatMap((e) => (e._tag === "AssistantDelta" ? [e.text] : []))
            assert.strictEqual(deltas.join(""), "Your key is …[REDACTED:openai-key] — keep it safe.")
            const proposed = tape.find((e) => e._tag === "ToolProposed")
            assert.include(JSON.stringify(proposed), Redaction.TOO_DEEP)
            assert.deepStrictEqual(yield* j.verify, { ok: true, checked: tape.length })
          })
        )
        // Closed: SQLite checkpointed the WAL into the file.
        assert.deepStrictEqual(secretsOnDisk(filename, SECRETS), [])
        assert.include(diskBytes(filename).toString("latin1"), "[REDACTED:")
        // Reopened: lookup by the secret key survives a restart.
        const again = yield* Effect.scoped(Effect.flatMap(open, (j) => j.findSessionByKey("alice", S.sessionKey)))
        assert.strictEqual(Option.getOrThrow(again).id, SID)
      })
  )

  it.live("an identifier that holds a secret is refused with a typed error, and nothing of it is stored", () =>
    Effect.gen(function* () {
      const filename = join(dir, "ids.db")
      const secretId = "ghp_q7Z0xv1nW8cR2yT5bK9mL3pA6sD4fG0hJ8kZ"
      const secretPrincipal = "token=Qz8wVb5Rt2LyQz8wVb5Rt2Ly"
      yield* Effect.scoped(
        Effect.gen(function* () {
          const j = yield* SqliteJournal.make({ filename })
          const byId = yield* Effect.flip(
            j.createSession(Records.makeSession({ id: secretId as never, principal: "p" }))
          )
          assert.strictEqual(byId._tag, "JournalError")
          assert.notInclude(byId.message, secretId)
          const byPrincipal = yield* Effect.flip(
            j.createSession(Records.makeSession({ id: SID, principal: secretPrincipal }))
          )
          assert.strictEqual(byPrincipal._tag, "JournalError")
          yield* j.createSession(Records.makeSession({ id: SID, principal: "p" }))
          const byRun = yield* Effect.flip(
            j.append(SID, [{ _tag: "UserMessage", sessionId: SID, runId: secretId as never, at: 1, text: "hi" }])
          )
          assert.strictEqual(byRun._tag, "JournalError")
          assert.strictEqual(yield* j.headSeq(SID), 0)
        })
      )
      assert.deepStrictEqual(secretsOnDisk(filename, [secretId, secretPrincipal.slice(6)]), [])
    })
  )

  it.live(
    "migration 0004: a file written before it gets key digests, its secret keys, titles, inputs and resolvers scrubbed, and its sessions stay findable",
    () =>
      Effect.gen(function* () {
        const filename = join(dir, "before-0004.db")
        const oldKey = "ghp_Old0Key1Was2Stored3Raw4Before5Redact"
        const oldTitle = `authorization: bearer ${S.titleToken}`
        // A long secret shrinks to a short marker: without secure_delete its bytes would stay in free space.
        const oldKeyBlock = Array.from({ length: 24 }, (_, i) => `${S.pemLine}${i}`).join("\n")
        const oldInput = `deploy with -----BEGIN PRIVATE KEY-----\n${oldKeyBlock}\n-----END PRIVATE KEY----- please`
        // Build a file at every schema version before 0004, with rows as an older journal wrote them.
        const db = new Database(filename)
        db.pragma("journal_mode = WAL")
        yield* Effect.gen(function* () {
          const sql = yield* makeSqlClient(db)
          const earlier = Object.fromEntries(Object.entries(migrations).filter(([id]) => id < "0004"))
          yield* Migrator.make({})({ loader: Migrator.fromRecord(earlier), table: "palyra_migrations" }).pipe(
            Effect.provideService(SqlClient.SqlClient, sql)
          )
          yield* sql`INSERT INTO sessions (id, principal, key, title, channel, created_at, updated_at)
            VALUES (${SID}, 'alice', ${oldKey}, ${oldTitle}, 'cli', 1, 1)`
          yield* sql`INSERT INTO sessions (id, principal, key, created_at, updated_at) VALUES (${SID2}, 'alice', 'plain-key', 1, 1)`
          yield* sql`INSERT INTO runs (id, session_id, principal, state, input, start_seq, created_at, updated_at)
            VALUES (${RID}, ${SID}, 'alice', 'Done', ${oldInput}, 1, 1, 1)`
          yield* sql`INSERT INTO approvals (id, session_id, run_id, tool_call_id, principal, tool, args_digest, risk, summary,
            status, scope, requested_at, expires_at, resolver, reason)
            VALUES (${AID}, ${SID}, ${RID}, ${TCID}, 'alice', 'http.fetch', 'd', 'low', 'fetch', 'approved', 'once', 1, 2,
              ${`ops Basic ${S.resolverBasic}`}, 'ok')`
        })
        db.close()
        const old = [oldKey, S.titleToken, S.resolverBasic, S.pemLine]
        assert.deepStrictEqual(secretsOnDisk(filename, old), old)

        yield* Effect.scoped(
          Effect.gen(function* () {
            const j = yield* SqliteJournal.make({ filename })
            const found = Option.getOrThrow(yield* j.findSessionByKey("alice", oldKey))
            assert.strictEqual(found.id, SID)
            assert.strictEqual(found.key, "[REDACTED:github-token]")
            assert.strictEqual(found.title, "authorization: [REDACTED:authorization]")
            assert.strictEqual(Option.getOrThrow(yield* j.findSessionByKey("alice", "plain-key")).id, SID2)
            assert.strictEqual(
              Option.getOrThrow(yield* j.getRun(RID)).input,
              "deploy with [REDACTED:private-key] please"
            )
          })
        )
        const check = new Database(filename)
        const plan = check
          .prepare("EXPLAIN QUERY PLAN SELECT * FROM sessions WHERE principal = ? AND key_digest = ? AND archived = 0")
          .all("alice", "x") as Array<{ detail: string }>
        check.pragma("wal_checkpoint(TRUNCATE)")
        check.close()
        assert.include(plan.map((p) => p.detail).join(" "), "sessions_principal_key_digest")
        // secure_delete: the replaced bytes were overwritten, not left in free space.
        assert.deepStrictEqual(secretsOnDisk(filename, old), [])
      })
  )
})

describe("session key lookup: the SQLite and in-memory journals agree", () => {
  const journals: ReadonlyArray<[string, Effect.Effect<Journal.Service, unknown, Scope.Scope>]> = [
    ["sqlite", SqliteJournal.make({ filename: ":memory:" })],
    ["memory", MemoryJournal.make()]
  ]
  for (const [name, make] of journals) {
    it.live(
      `${name}: found by the raw key only, per principal; keys that redact alike stay distinct; rename and archive`,
      () =>
        Effect.scoped(
          Effect.gen(function* () {
            const j = yield* make
            yield* j.createSession(Records.makeSession({ id: SID, principal: "alice", key: S.sessionKey }))
            yield* j.createSession(Records.makeSession({ id: SID2, principal: "alice", key: S.otherKey }))
            const a = Option.getOrThrow(yield* j.findSessionByKey("alice", S.sessionKey))
            assert.strictEqual(a.id, SID)
            assert.strictEqual(Option.getOrThrow(yield* j.findSessionByKey("alice", S.otherKey)).id, SID2)
            assert.isTrue(Option.isNone(yield* j.findSessionByKey("bob", S.sessionKey)))
            assert.isTrue(Option.isNone(yield* j.findSessionByKey("alice", "[REDACTED:github-token]")))
            const taken = yield* Effect.flip(
              j.createSession(
                Records.makeSession({
                  id: "01KA000000000000000000000C" as never,
                  principal: "alice",
                  key: S.sessionKey
                })
              )
            )
            assert.strictEqual(taken._tag, "Conflict")
            // Writing back what was read keeps the lookup.
            yield* j.updateSession({ ...a, title: "renamed", updatedAt: 5 })
            assert.strictEqual(Option.getOrThrow(yield* j.findSessionByKey("alice", S.sessionKey)).title, "renamed")
            // Archiving frees the key.
            yield* j.updateSession({ ...a, archived: true, updatedAt: 6 })
            assert.isTrue(Option.isNone(yield* j.findSessionByKey("alice", S.sessionKey)))
            yield* j.createSession(
              Records.makeSession({ id: "01KA000000000000000000000D" as never, principal: "alice", key: S.sessionKey })
            )
            assert.strictEqual(
              Option.getOrThrow(yield* j.findSessionByKey("alice", S.sessionKey)).id,
              "01KA000000000000000000000D"
            )
          })
        )
    )
  }
})
