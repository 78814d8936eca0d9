/**
 * `palyra journal verify --anchor FILE`: offline verification of a journal file and its witness, by
 * the real CLI process (tsx, from the sources) and in-process through `Cli.main`.
 */
import { spawn } from "node:child_process"
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { Records } from "@palyra/core"
import { Anchor, SqliteJournal } from "@palyra/journal"
import Database from "better-sqlite3"
import { Effect, Layer, Logger } from "effect"
import { describe, expect, it } from "vitest"
import { Cli } from "../src/index.js"

const here = dirname(fileURLToPath(import.meta.url))
const tsx = join(dirname(createRequire(import.meta.url).resolve("tsx/package.json")), "dist/esm/index.mjs")
const S = "01KA0000000000000000000SES" as never
const RUN = "01KA0000000000000000000RUN" as never

/** A data dir laid out as palyrad leaves it: `.palyra/{journal.db, anchor.key, journal.anchor}`, anchored. */
const dataDir = async (key = join(".palyra", "anchor.key")) => {
  const cwd = mkdtempSync(join(tmpdir(), "palyra-verify-"))
  const data = join(cwd, ".palyra")
  mkdirSync(data)
  const files = {
    cwd,
    db: join(data, "journal.db"),
    key: join(cwd, key),
    witness: join(data, "journal.anchor")
  }
  const program = Effect.gen(function* () {
    const j = yield* SqliteJournal.SqliteJournal
    yield* j.createSession(Records.makeSession({ id: S, principal: "alice" }))
    for (let i = 0; i < 6; i++) {
      yield* j.append(S, [{ _tag: "SessionNote", sessionId: S, runId: null, at: i, author: "a", text: `n${i}` }])
    }
    yield* j.append(
      S,
      [{ _tag: "RunAccepted", sessionId: S, runId: RUN, at: 9, principal: "alice", queuedBehind: null }],
      {
        createRun: {
          id: RUN,
          sessionId: S,
          principal: "alice",
          state: "Accepted",
          input: "summarise the report",
          startSeq: 7,
          error: null,
          createdAt: 9,
          updatedAt: 9
        }
      }
    )
  })
  await Effect.runPromise(
    program.pipe(
      Effect.provide(
        Layer.provideMerge(
          Anchor.layer({ keyFile: files.key, witnessFile: files.witness }),
          SqliteJournal.layer({ filename: files.db })
        )
      ),
      Effect.provide(Logger.remove(Logger.defaultLogger))
    )
  )
  return files
}

const runCli = (cwd: string, args: ReadonlyArray<string>) =>
  new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
    const proc = spawn(
      process.execPath,
      ["--conditions=@palyra/source", "--import", tsx, join(here, "..", "src", "bin", "palyra.ts"), ...args],
      {
        cwd,
        env: { ...process.env, PALYRA_DATA_DIR: "", PALYRA_HOME: "", PALYRA_CONFIG: "" },
        stdio: ["ignore", "pipe", "pipe"]
      }
    )
    let out = ""
    let err = ""
    proc.stdout.on("data", (d) => (out += d))
    proc.stderr.on("data", (d) => (err += d))
    proc.on("exit", (code) => resolve({ code, out, err }))
  })

const inProcess = async (args: ReadonlyArray<string>) => {
  let out = ""
  let err = ""
  const code = await Cli.main(
    args,
    {},
    {
      out: (t) => {
        out += t
      },
      err: (t) => {
        err += t
      },
      ask: async () => "",
      interactive: false
    }
  )
  return { code, out, err }
}

describe("palyra journal verify --anchor (offline)", () => {
  it("the real CLI verifies a clean data dir (defaults resolved like palyrad), then names a truncation the plain chain misses", async () => {
    const f = await dataDir()
    const clean = await runCli(f.cwd, ["journal", "verify", "--anchor", ".palyra/journal.anchor"])
    expect(clean.err).toBe("")
    expect(clean.code).toBe(0)
    expect(clean.out).toContain(`journal ${f.db}`)
    expect(clean.out).toMatch(/chains: intact \(7 tape rows/)
    expect(clean.out).toMatch(/anchors: 2 verified .* saw 7 rows and 2 record versions/)
    expect(clean.out.trimEnd().split("\n").at(-1)).toBe("verified")

    // The attacker cuts the last two rows and rewrites chain_head to match.
    const db = new Database(f.db)
    const last = db.prepare("SELECT hash FROM tape_events WHERE chain_seq = 5").get() as { hash: string }
    db.prepare("DELETE FROM tape_events WHERE chain_seq > 5").run()
    db.prepare("UPDATE chain_head SET chain_seq = 5, count = 5, hash = ?").run(last.hash)
    db.close()
    const cut = await runCli(f.cwd, ["journal", "verify", "--anchor", ".palyra/journal.anchor"])
    expect(cut.code).toBe(1)
    expect(cut.out).toMatch(/chains: intact \(5 tape rows/)
    expect(cut.out).toMatch(
      /anchors: FAILED \(truncated\) in .*: truncated: the anchor at \S+ saw 7 rows with head [0-9a-f]{64}; the file has 5/
    )
    expect(cut.out.trimEnd().split("\n").at(-1)).toBe("NOT verified")
  }, 60_000)

  it("explicit --db and --key (the .pub alone): an edited run input is named, exit 1", async () => {
    const f = await dataDir()
    const args = ["journal", "verify", "--anchor", f.witness, "--db", f.db, "--key", `${f.key}.pub`]
    expect((await inProcess(args)).code).toBe(0)
    const db = new Database(f.db)
    db.prepare("UPDATE runs SET input = 'wire the money' WHERE id = ?").run(RUN)
    db.close()
    const edited = await inProcess(args)
    expect(edited.code).toBe(1)
    expect(edited.out).toContain(`chains: BROKEN (row_edited) after 7 good tape rows: runs ${RUN}: input differs`)
  })

  it("the key path comes from the config file (anchor.key_file), as palyrad reads it", async () => {
    const f = await dataDir(join("keys", "palyra-anchor.key"))
    const config = join(f.cwd, "palyra.toml")
    writeFileSync(config, 'data_dir = ".palyra"\n\n[anchor]\nkey_file = "keys/palyra-anchor.key"\n')
    const r = await inProcess(["journal", "verify", "--anchor", f.witness, "--config", config])
    expect(r.err).toBe("")
    expect(r.code).toBe(0)
    expect(r.out).toContain(`journal ${f.db}`)
    // Without it, the default <data_dir>/anchor.key does not exist: an error, not a pass.
    const defaults = await inProcess(["journal", "verify", "--anchor", f.witness, "--data-dir", join(f.cwd, ".palyra")])
    expect(defaults.code).toBe(1)
    expect(defaults.err).toMatch(/cannot read the anchor key .*\.palyra\/anchor\.key/)
  })

  it("a missing journal file is an error (exit 1), a missing --anchor value a usage error (exit 2)", async () => {
    const f = await dataDir()
    const missing = await inProcess(["journal", "verify", "--anchor", f.witness, "--db", join(f.cwd, "nope.db")])
    expect(missing.code).toBe(1)
    expect(missing.err).toMatch(/cannot verify .*nope\.db/)
    const usage = await inProcess(["journal", "verify", "--anchor"])
    expect(usage.code).toBe(2)
  })
})
