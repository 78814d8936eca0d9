// The stored bytes are pinned: a known batch of appends, through either writer, stores exactly these
// tape rows (payloads, chain seqs, `prev_hash`, `hash`) and these record versions. A change to the
// append path (how a batch is encoded, decoded, hashed or redacted) must leave them identical: the
// hash chains of files already written depend on them.
import { createHash } from "node:crypto"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Records } from "@palyra/core"
import Database from "better-sqlite3"
import { Effect } from "effect"
import { SqliteJournal } from "../src/index.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-stored-bytes-"))
const sid = (i: number) => `01KA${String(i).padStart(22, "0")}` as never
const RUN = "01KA0000000000000000000RUN" as never
const TC = "01KA0000000000000000000TC1" as never

const result = (s: number, i: number, output: string) => ({
  _tag: "ToolResult" as const,
  sessionId: sid(s),
  runId: null,
  at: 1_700_000_000_000 + i,
  toolCallId: TC,
  tool: "fs.list",
  status: "ok" as const,
  output,
  truncated: false,
  durationMs: 3
})
const OUTPUTS = [
  "The file lists 12 entries: README.md, package.json, src/, … (a realistic tool output)",
  'quotes " and \\ backslashes, a tab\there, a newline\nthere, and 日本語 and 😀',
  "curl -H 'authorization: bearer q7Z0xv1nW8cR2yT5bK9mL3pA6sD4fG0hJ8kE2uIo' https://api.example.com",
  ""
]

/** SHA-256 over every stored tape row and record version, in order. */
const storedDigest = (filename: string) => {
  const db = new Database(filename, { readonly: true })
  try {
    const tape = db
      .prepare(
        "SELECT chain_seq, session_id, tape_seq, run_id, kind, created_at, payload, prev_hash, hash FROM tape_events ORDER BY chain_seq"
      )
      .raw()
      .all()
    const versions = db
      .prepare("SELECT seq, tbl, row_id, digest, hints, prev_hash, hash FROM record_versions ORDER BY seq")
      .raw()
      .all()
    const head = db.prepare("SELECT chain_seq, hash, count, records_seq, records_hash FROM chain_head").raw().get()
    return {
      rows: tape.length,
      last: (tape[tape.length - 1] as Array<unknown>)[8],
      digest: createHash("sha256")
        .update(JSON.stringify([tape, versions, head]))
        .digest("hex")
    }
  } finally {
    db.close()
  }
}

describe("the stored bytes of a known batch", () => {
  for (const writer of ["worker", "inline"] as const) {
    it.effect(`are pinned (${writer} writer)`, () =>
      Effect.gen(function* () {
        const filename = join(dir, `${writer}.db`)
        yield* Effect.scoped(
          Effect.gen(function* () {
            const j = yield* SqliteJournal.make({ filename, writer })
            for (let s = 0; s < 3; s++) {
              yield* j.createSession(
                Records.makeSession({
                  id: sid(s),
                  principal: "p",
                  createdAt: 1_700_000_000_000,
                  updatedAt: 1_700_000_000_000
                })
              )
            }
            // Concurrent appends to three sessions (one batch across the thread boundary, in
            // submission order), multi-event appends, and a run's admission with its effects.
            yield* Effect.forEach(
              Array.from({ length: 24 }, (_, i) => i),
              (i) => {
                const e = (k: number) => result(i % 3, i * 2 + k, OUTPUTS[(i + k) % 4]!)
                return j.append(sid(i % 3), i % 2 === 0 ? [e(0)] : [e(0), e(1)])
              },
              { concurrency: "unbounded", discard: true }
            )
            yield* j.append(
              sid(0),
              [{ _tag: "RunStarted", sessionId: sid(0), runId: RUN, at: 1_700_000_001_000 } as never],
              {
                createRun: {
                  id: RUN,
                  sessionId: sid(0),
                  principal: "p",
                  state: "Running",
                  input: "hello token=abcdef0123456789",
                  startSeq: 1,
                  error: null,
                  createdAt: 1_700_000_001_000,
                  updatedAt: 1_700_000_001_000
                } as never
              }
            )
          })
        )
        assert.deepStrictEqual(storedDigest(filename), PINNED)
      })
    )
  }
})

const PINNED = {
  rows: 37,
  last: "cff444dd27dce0dd53099d87815b213a159327d5820f7dde09aeef0bc64426c9",
  digest: "d966c046551d5c6910fbd990d4ae8ce3ff075de398e9de24ea901f3fb1633822"
}
