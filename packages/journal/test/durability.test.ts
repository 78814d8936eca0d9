import { type ChildProcess, spawn } from "node:child_process"
import { mkdtempSync, readFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { it as effectIt } from "@effect/vitest"
import { Records } from "@palyra/core"
import Database from "better-sqlite3"
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import { Anchor, SqliteJournal } from "../src/index.js"
import { diskBytes } from "./diskBytes.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-durability-"))
const fixture = fileURLToPath(new URL("./fixtures/crash-writer.ts", import.meta.url))
const SESSION = "01KA0000000000000000000CRS"

const withJournal = <A, E>(filename: string, f: (j: SqliteJournal.Service) => Effect.Effect<A, E>) =>
  Effect.runPromise(Effect.scoped(Effect.flatMap(SqliteJournal.make({ filename }), f)) as Effect.Effect<A, unknown>)

/** Start the writer, wait until it acknowledged some appends, SIGKILL it at a random moment. */
const crashOnce = (
  filename: string,
  acked: Set<number>,
  anchor: ReadonlyArray<string>,
  env: Record<string, string> = {}
) =>
  new Promise<void>((resolve, reject) => {
    const child: ChildProcess = spawn(
      process.execPath,
      ["--conditions=@palyra/source", "--import", "tsx", fixture, filename, SESSION, ...anchor],
      { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } }
    )
    let buffer = ""
    let stderr = ""
    let ready = false
    let killScheduled = false
    child.stderr!.on("data", (d) => (stderr += d))
    child.stdout!.on("data", (d: Buffer) => {
      buffer += d.toString()
      const lines = buffer.split("\n")
      buffer = lines.pop()!
      for (const line of lines) {
        if (line === "ready") {
          ready = true
          continue
        }
        if (!killScheduled) {
          // After the first acknowledgement, kill somewhere in the next 0–120 ms of the write storm.
          killScheduled = true
          setTimeout(() => child.kill("SIGKILL"), Math.random() * 120)
        }
        for (const seq of line.split(",")) if (seq) acked.add(Number(seq))
      }
    })
    child.on("exit", (_code, signal) => {
      if (signal === "SIGKILL" && ready) resolve()
      else reject(new Error(`writer exited unexpectedly (${signal ?? _code}): ${stderr}`))
    })
  })

describe("crash safety", () => {
  /** Kill the writer `rounds` times; after each, everything acknowledged is there and verifies. */
  const crashRounds = async (name: string, rounds: number, env: Record<string, string> = {}) => {
    const filename = join(dir, `${name}.db`)
    // The writer also anchors every 5 ms: each restart checks the newest anchor against the journal
    // (a mismatch would stop the writer, and this test), and every anchor verifies after each kill.
    const anchor = { keyFile: join(dir, `${name}-keys`, "anchor.key"), witnessFile: join(dir, `${name}.anchor`) }
    const acked = new Set<number>()
    for (let i = 0; i < rounds; i++) {
      const before = acked.size
      await crashOnce(filename, acked, [anchor.keyFile, anchor.witnessFile], env)
      expect(acked.size).toBeGreaterThan(before) // the writer made progress this round
      const { head, tape, verify, anchored } = await withJournal(filename, (j) =>
        Effect.all({
          head: j.headSeq(SESSION as never),
          tape: j.readTape(SESSION as never, { afterSeq: 0 }),
          verify: j.verify,
          anchored: Anchor.verify(j, anchor)
        })
      )
      expect(verify).toEqual({ ok: true, checked: tape.length })
      expect(anchored).toMatchObject({ ok: true })
      expect(tape.map((e) => e.tapeSeq)).toEqual(tape.map((_, k) => k + 1))
      expect(head).toBe(tape.length)
      for (const seq of acked) expect(seq).toBeLessThanOrEqual(head)
    }
    // The run/approval worker got through its record writes many times (verify checked them all).
    const db = new Database(filename, { readonly: true })
    const versions = db.prepare("SELECT tbl, count(*) AS n FROM record_versions GROUP BY tbl ORDER BY tbl").all()
    db.close()
    expect(versions).toEqual([
      { tbl: "approvals", n: expect.any(Number) },
      { tbl: "runs", n: expect.any(Number) },
      { tbl: "sessions", n: 1 }
    ])
    for (const v of versions as Array<{ n: number }>) expect(v.n).toBeGreaterThan(0)
    const witness = readFileSync(anchor.witnessFile, "utf8").split("\n").filter(Boolean)
    expect(witness.length).toBeGreaterThan(rounds)
  }

  it("SIGKILL at random moments, 20 times: every acknowledged event is there, both chains and every record verify, seqs are gap-free", async () => {
    await crashRounds("crash", 20)
  }, 180_000)

  it("SIGKILL while the writer checkpoints when idle (every 16 frames: its fsyncs and copy under way most of the time), 10 times: the same", async () => {
    await crashRounds("crash-idle", 10, { CRASH_IDLE_FRAMES: "16" })
  }, 180_000)
})

describe("tamper evidence", () => {
  const seed = async (filename: string) => {
    await withJournal(filename, (j) =>
      Effect.gen(function* () {
        for (const sid of [SESSION, "01KA0000000000000000000TWO"]) {
          yield* j.createSession(Records.makeSession({ id: sid as never, principal: "p" }))
        }
        for (let i = 0; i < 10; i++) {
          const sid = (i % 3 === 2 ? "01KA0000000000000000000TWO" : SESSION) as never
          yield* j.append(sid, [
            { _tag: "SessionNote", sessionId: sid, runId: null, at: 1000 + i, author: "a", text: `note ${i}` }
          ])
        }
      })
    )
    return new Database(filename)
  }
  const verifyFile = (filename: string) => withJournal(filename, (j) => j.verify)

  it("an intact journal verifies", async () => {
    const f = join(dir, "intact.db")
    ;(await seed(f)).close()
    expect(await verifyFile(f)).toEqual({ ok: true, checked: 10 })
  })

  it("editing a payload is detected at that row", async () => {
    const f = join(dir, "edit.db")
    const db = await seed(f)
    db.prepare("UPDATE tape_events SET payload = replace(payload, 'note 4', 'note X') WHERE chain_seq = 5").run()
    db.close()
    const r = await verifyFile(f)
    expect(r).toMatchObject({ ok: false, reason: "edited", checked: 4 })
    expect(r.ok === false && r.detail).toMatch(/^row 5 /)
  })

  it("deleting a row is detected at the next row of the chain", async () => {
    const f = join(dir, "delete.db")
    const db = await seed(f)
    db.prepare("DELETE FROM tape_events WHERE chain_seq = 4").run()
    db.close()
    const r = await verifyFile(f)
    expect(r).toMatchObject({ ok: false, reason: "deleted" })
    expect(r.ok === false && r.detail).toMatch(/^row 5 /)
  })

  it("swapping two rows is detected", async () => {
    const f = join(dir, "swap.db")
    const db = await seed(f)
    db.transaction(() => {
      db.prepare("UPDATE tape_events SET chain_seq = -1 WHERE chain_seq = 2").run()
      db.prepare("UPDATE tape_events SET chain_seq = 2 WHERE chain_seq = 4").run()
      db.prepare("UPDATE tape_events SET chain_seq = 4 WHERE chain_seq = -1").run()
    })()
    db.close()
    const r = await verifyFile(f)
    expect(r).toMatchObject({ ok: false, reason: "reordered" })
    expect(r.ok === false && r.detail).toMatch(/^row 2 /)
  })

  it("truncating the tail is detected against the chain head", async () => {
    const f = join(dir, "truncate.db")
    const db = await seed(f)
    db.prepare("DELETE FROM tape_events WHERE chain_seq > 7").run()
    db.close()
    const r = await verifyFile(f)
    expect(r).toMatchObject({ ok: false, reason: "truncated", checked: 7 })
    expect(r.ok === false && r.detail).toMatch(/last present: row 7/)
  })

  it("a forged row with a recomputed hash inserted mid-chain is detected", async () => {
    const f = join(dir, "insert.db")
    const db = await seed(f)
    const row = db.prepare("SELECT * FROM tape_events WHERE chain_seq = 3").get() as Record<string, unknown>
    db.prepare("UPDATE tape_events SET chain_seq = chain_seq + 100 WHERE chain_seq > 3").run()
    const payload = JSON.stringify({ author: "mallory", text: "forged" })
    const hash = SqliteJournal.rowHash(row.hash as string, SESSION, 99, null, "SessionNote", 5000, payload)
    db.prepare(
      "INSERT INTO tape_events (chain_seq, session_id, tape_seq, run_id, kind, created_at, payload, prev_hash, hash) VALUES (4, ?, 99, NULL, 'SessionNote', 5000, ?, ?, ?)"
    ).run(SESSION, payload, row.hash, hash)
    db.close()
    const r = await verifyFile(f)
    expect(r.ok).toBe(false)
    expect(r.ok === false && r.detail).toMatch(/^row 4 /)
  })
})

describe("redaction", () => {
  const secrets = [
    "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcd",
    "sk-ant-api03-ZYXWVUTSRQPONMLKJIHGFEDCBA0123456789-abc",
    "AKIAIOSFODNN7EXAMPLE",
    "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
    "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOp",
    "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "sk_live_51HxYzAbCdEfGhIjKlMnOpQr",
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    "hunter2-correct-horse-battery",
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"
  ]
  const pem = `-----BEGIN PRIVATE KEY-----\n${secrets[9]}\n-----END PRIVATE KEY-----`

  effectIt.live("no secret from a list of realistic samples reaches the database file bytes", () =>
    Effect.gen(function* () {
      const filename = join(dir, "redact.db")
      yield* Effect.scoped(
        Effect.gen(function* () {
          const j = yield* SqliteJournal.make({ filename, redaction: { literals: ["my-configured-secret-value"] } })
          const sid = SESSION as never
          yield* j.createSession(Records.makeSession({ id: sid, principal: "p", title: `debug ${secrets[0]}` }))
          const stored = yield* j.append(
            sid,
            [
              {
                _tag: "UserMessage",
                sessionId: sid,
                runId: null,
                at: 1,
                text: `my key is ${secrets[0]} and ${secrets[1]}`
              },
              {
                _tag: "ToolProposed",
                sessionId: sid,
                runId: null,
                at: 2,
                toolCallId: "01KA0000000000000000000TC1" as never,
                providerCallId: "c",
                tool: "http.fetch",
                args: {
                  url: "https://admin:s3cretPassw0rd@example.com/x",
                  headers: { Authorization: `Bearer ${secrets[7]}`, "X-Api-Key": "plainvalue123" },
                  password: secrets[8],
                  body: `aws=${secrets[2]} gh=${secrets[3]} slack=${secrets[4]} google=${secrets[5]} stripe=${secrets[6]}`,
                  key: pem,
                  config: "API_KEY=abcdef123456 other my-configured-secret-value"
                },
                argsDigest: "d".repeat(64)
              }
            ],
            {}
          )
          const text = JSON.stringify(stored)
          for (const s of secrets) expect(text).not.toContain(s)
          expect(text).toContain("[REDACTED:openai-key]")
          expect(text).toContain("[REDACTED:password]")
          expect(text).toContain("[REDACTED:authorization]")
        })
      )
      // Checkpoint the WAL into the main file, then read every byte of every file on disk.
      const db = new Database(filename)
      db.pragma("wal_checkpoint(TRUNCATE)")
      db.close()
      const bytes = diskBytes(filename).toString("latin1")
      expect(bytes).toContain("REDACTED")
      for (const s of [...secrets, "s3cretPassw0rd", "plainvalue123", "abcdef123456", "my-configured-secret-value"]) {
        expect(bytes).not.toContain(s)
      }
    })
  )
})
