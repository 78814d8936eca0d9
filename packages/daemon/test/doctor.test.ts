/**
 * `palyra doctor`: each check failing and passing, on real files, real sockets, a real palyrad, a
 * real local model server and the real Cedar engine and sandbox probe.
 */
import { spawn } from "node:child_process"
import { chmodSync, mkdirSync, writeFileSync } from "node:fs"
import { createServer as createHttpServer, type Server } from "node:http"
import { type AddressInfo, createServer, type Socket } from "node:net"
import { join } from "node:path"
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import { Gateway, Ids, Journal, Records, ScriptedModel } from "@palyra/core"
import { CedarPolicy } from "@palyra/core/cedar"
import { Watchdog } from "@palyra/core/memory"
import { gatewayLayer } from "@palyra/core/testing"
import { Processes } from "@palyra/core/tools"
import { Anchor, SqliteJournal, SqliteMemoryStore } from "@palyra/journal"
import Database from "better-sqlite3"
import { Effect, Layer, Logger } from "effect"
import { afterAll, describe, expect, it } from "vitest"
import { Cli, Doctor, type VerifyOffline } from "../src/index.js"
import { fresh, startDaemon, stopDaemons } from "./support.js"

afterAll(stopDaemons)

/** An `Io` that keeps what the CLI prints. */
const capture = () => {
  const seen = { out: "", err: "" }
  const io: Cli.Io = {
    out: (text) => {
      seen.out += text
    },
    err: (text) => {
      seen.err += text
    },
    ask: async () => "",
    interactive: false
  }
  return { io, seen }
}

const doctor = (cwd: string, env: Record<string, string> = {}, extra: Partial<Doctor.Options> = {}) =>
  Effect.runPromise(
    Doctor.run({ flags: {}, env, cwd, timeout: "3 seconds", ...extra }).pipe(Effect.provide(FetchHttpClient.layer))
  )
const find = (checks: ReadonlyArray<Doctor.Check>, name: string) => {
  const check = checks.find((c) => c.name === name)
  if (check === undefined) throw new Error(`no ${name} check in ${JSON.stringify(checks)}`)
  return check
}
/** A dir with a palyra.toml (ports 0 unless given). */
const setup = (toml = "") => {
  const dir = fresh("palyra-doctor-")
  writeFileSync(join(dir, "palyra.toml"), `${toml}\n[server]\nhttp_port = 0\ngrpc_port = 0\n`)
  return dir
}

const freePort = () =>
  new Promise<number>((resolve) => {
    const probe = createServer()
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address() as AddressInfo
      probe.close(() => resolve(port))
    })
  })

const S = Ids.SessionId.make("01KA0000000000000000000SES")

/** A journal of `rows` tape rows in `<dir>/.palyra`, anchored when `anchored`. */
const journal = async (dir: string, rows: number, anchored: boolean) => {
  const data = join(dir, ".palyra")
  mkdirSync(data, { recursive: true, mode: 0o700 })
  const program = Effect.gen(function* () {
    const j = yield* SqliteJournal.SqliteJournal
    yield* j.createSession(Records.makeSession({ id: S, principal: "alice" }))
    for (let done = 0; done < rows; done += 500) {
      const [first, ...rest] = Array.from({ length: Math.min(500, rows - done) }, (_, k) => ({
        _tag: "SessionNote" as const,
        sessionId: S,
        runId: null,
        at: done + k,
        author: "a",
        text: `note ${done + k}`
      }))
      yield* j.append(S, [first!, ...rest])
    }
  })
  const store = SqliteJournal.layer({ filename: join(data, "journal.db") })
  const layer = anchored
    ? Layer.provideMerge(
        Anchor.layer({ keyFile: join(data, "anchor.key"), witnessFile: join(data, "journal.anchor") }),
        store
      )
    : store
  await Effect.runPromise(program.pipe(Effect.provide(layer), Effect.provide(Logger.remove(Logger.defaultLogger))))
  return join(data, "journal.db")
}

describe("palyra doctor", () => {
  it("config: a bad key is named, and the other checks wait for a configuration that loads", async () => {
    const dir = setup('[approvals]\ntimeout_seconds = "soon"\n')
    const checks = await doctor(dir)
    expect(checks).toHaveLength(1)
    expect(checks[0]).toMatchObject({ name: "config", status: "fail" })
    expect(checks[0]!.detail).toMatch(/approvals\.timeout_seconds/)
    const good = await doctor(setup())
    expect(find(good, "config")).toMatchObject({ status: "ok" })
    // No policies_dir: palyrad installs the built-ins at its first tool call, so doctor loads Cedar now.
    expect(find(good, "policies")).toMatchObject({ status: "ok" })
    expect(find(good, "policies")!.detail).toMatch(/Cedar loads them/)
    expect(good.map((c) => c.name)).toEqual([
      "config",
      "http port",
      "grpc port",
      "data dir",
      "journal",
      "model demo:scripted",
      "policies",
      "sandbox",
      "after-run"
    ])
  })

  it("ports: free is fine; held by another program is a problem; held by palyrad is fine (and so are its data dir and anchored journal)", async () => {
    const [http, grpc] = [await freePort(), await freePort()]
    const dir = setup()
    writeFileSync(join(dir, "palyra.toml"), `[server]\nhttp_port = ${http}\ngrpc_port = ${grpc}\n`)
    const free = await doctor(dir)
    expect(find(free, "http port")).toMatchObject({ status: "ok", detail: `127.0.0.1:${http} is free` })

    const accepted: Array<Socket> = []
    const squatter = createServer((socket) => accepted.push(socket)).listen(grpc, "127.0.0.1")
    await new Promise((r) => squatter.once("listening", r))
    try {
      const taken = find(await doctor(dir), "grpc port")
      expect(taken).toMatchObject({ status: "fail", detail: `127.0.0.1:${grpc} is in use by another program` })
      expect(taken.fix).toMatch(/server\.grpc_port/)
    } finally {
      for (const socket of accepted) socket.destroy()
      await new Promise((r) => squatter.close(r))
    }

    await startDaemon(dir)
    const ours = await doctor(dir)
    expect(find(ours, "http port")).toMatchObject({ status: "ok", detail: expect.stringMatching(/in use by palyrad/) })
    expect(find(ours, "grpc port")).toMatchObject({ status: "ok", detail: expect.stringMatching(/in use by palyrad/) })
    expect(find(ours, "data dir")).toMatchObject({ status: "ok" })
    expect(find(ours, "journal")).toMatchObject({
      status: "ok",
      detail: expect.stringMatching(/chains intact .*signed anchor/)
    })
  }, 90_000)

  it("data dir: group/other access to the dir, the token or the anchor key is a problem with the chmod to run", async () => {
    const dir = setup()
    const data = join(dir, ".palyra")
    mkdirSync(data, { mode: 0o700 })
    writeFileSync(join(data, "admin.token"), "plt_x\n", { mode: 0o600 })
    expect(find(await doctor(dir), "data dir").status).toBe("ok")
    chmodSync(data, 0o755)
    chmodSync(join(data, "admin.token"), 0o644)
    const open = find(await doctor(dir), "data dir")
    expect(open.status).toBe("fail")
    expect(open.detail).toContain("mode 0755")
    expect(open.fix).toBe(`chmod 700 ${data} && chmod 600 ${join(data, "admin.token")}`)
  })

  it("journal: a large one reports progress per page and verifies; an edited row is named", async () => {
    const dir = setup()
    const db = await journal(dir, 4500, false)
    const seen: Array<VerifyOffline.Progress> = []
    const checks = await doctor(dir, {}, { onProgress: (p) => Effect.sync(() => seen.push(p)) })
    expect(find(checks, "journal")).toMatchObject({
      status: "warn",
      detail: expect.stringMatching(/chains intact \(4500 tape rows\); no anchor key yet/)
    })
    const tape = seen.filter((p) => p.chain === "tape")
    expect(tape.map((p) => p.checked)).toEqual([2000, 4000, 4500])
    expect(new Set(tape.map((p) => p.total))).toEqual(new Set([4500]))

    // The CLI draws it (one line per page when stderr is not a terminal); stdout stays JSON.
    const { io, seen: printed } = capture()
    expect(await Cli.main(["doctor", "--json"], {}, io, dir)).toBe(0)
    expect(JSON.parse(printed.out)).toMatchObject({ ok: true })
    expect(printed.err.match(/^journal: tape rows +\[[#-]+\] +\d+% [\d,]+\/4,500$/gm)).toHaveLength(3)
    expect(printed.err).toContain("100% 4,500/4,500")

    const edit = new Database(db)
    edit
      .prepare("UPDATE tape_events SET payload = replace(payload, 'note 1234', 'note 9999') WHERE tape_seq = 1235")
      .run()
    edit.close()
    const broken = find(await doctor(dir), "journal")
    expect(broken.status).toBe("fail")
    expect(broken.detail).toMatch(/BROKEN \(edited\).*tape_seq 1235/)
    expect(broken.fix).toMatch(/restore from a backup/)
  }, 60_000)

  it("journal with anchors: verified with the key; a witness that no longer matches fails", async () => {
    const dir = setup()
    await journal(dir, 20, true)
    expect(find(await doctor(dir), "journal")).toMatchObject({ status: "ok" })
    writeFileSync(join(dir, ".palyra", "journal.anchor"), "")
    const unanchored = find(await doctor(dir), "journal")
    expect(unanchored.status).toBe("fail")
    expect(unanchored.detail).toMatch(/anchors FAILED \(unanchored\)/)
  })

  it("model: an openai-compatible server is asked for /models; keys must be set for openai and anthropic", async () => {
    let listed = ["llama3.2", "qwen"]
    const server: Server = createHttpServer((req, res) => {
      if (req.url === "/v1/models")
        res
          .writeHead(200, { "content-type": "application/json" })
          .end(JSON.stringify({ object: "list", data: listed.map((id) => ({ id, object: "model" })) }))
      else res.writeHead(404).end()
    })
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r))
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`
    try {
      const dir = setup(
        `model = ["openai-compatible:${base}#llama3.2", "openai:gpt-4.1-mini", "anthropic:claude-sonnet-4-5"]`
      )
      const checks = await doctor(dir, { OPENAI_API_KEY: "sk-test-0123456789", ANTHROPIC_API_KEY: "sk-ant-0123456789" })
      expect(find(checks, `model openai-compatible:${base}#llama3.2`)).toMatchObject({
        status: "ok",
        detail: `${base}/models serves llama3.2`
      })
      expect(find(checks, "model openai:gpt-4.1-mini")).toMatchObject({ status: "ok" })
      // Not installed in this workspace: the daemon would refuse to start with it.
      expect(find(checks, "model anthropic:claude-sonnet-4-5")).toMatchObject({
        status: "fail",
        detail: expect.stringMatching(/@ai-sdk\/anthropic is not installed/)
      })
      const noKeys = await doctor(dir)
      expect(find(noKeys, "model openai:gpt-4.1-mini")).toMatchObject({
        status: "fail",
        detail: "OPENAI_API_KEY is not set"
      })
      listed = ["qwen"]
      expect(find(await doctor(dir), `model openai-compatible:${base}#llama3.2`)).toMatchObject({
        status: "warn",
        detail: expect.stringMatching(/does not list llama3\.2 \(it lists qwen\)/)
      })
    } finally {
      await new Promise((r) => server.close(r))
    }
    const down = setup(`model = "openai-compatible:${base}#llama3.2"`)
    const unreachable = find(await doctor(down), `model openai-compatible:${base}#llama3.2`)
    expect(unreachable.status).toBe("fail")
    expect(unreachable.detail).toMatch(/cannot reach/)
    expect(unreachable.fix).toMatch(/start the model server/)
  }, 60_000)

  it("policies: valid Cedar files pass; a bad one fails with Cedar's diagnostics; a missing folder fails", async () => {
    const dir = fresh("palyra-doctor-")
    mkdirSync(join(dir, "policies"))
    writeFileSync(join(dir, "palyra.toml"), 'policies_dir = "policies"\n[server]\nhttp_port = 0\ngrpc_port = 0\n')
    writeFileSync(join(dir, "policies", "base.cedar"), CedarPolicy.defaultPolicies)
    expect(find(await doctor(dir), "policies")).toMatchObject({ status: "ok" })
    writeFileSync(
      join(dir, "policies", "zz-bad.cedar"),
      '@id("bad")\npermit (principal, action == Palyra::Action::"tool.explode", resource);\n'
    )
    const bad = find(await doctor(dir), "policies")
    expect(bad.status).toBe("fail")
    expect(bad.detail).toMatch(/policy set rejected[\s\S]*tool\.explode/)
    writeFileSync(join(dir, "palyra.toml"), 'policies_dir = "nowhere"\n[server]\nhttp_port = 0\ngrpc_port = 0\n')
    expect(find(await doctor(dir), "policies")).toMatchObject({
      status: "fail",
      detail: expect.stringMatching(/nowhere does not exist/)
    })
  }, 60_000)

  it("sandbox: the configured tier must work here; the CLI exits 1 on any failed check", async () => {
    const dir = setup('[shell]\nsandbox = "os"\n')
    const missing = find(await doctor(dir, {}, { sandbox: { bwrapPath: "/nonexistent/bwrap" } }), "sandbox")
    expect(missing.status).toBe("fail")
    expect(missing.detail).toMatch(/shell\.sandbox = "os" does not work here: bubblewrap/)
    expect(missing.fix).toMatch(/install bubblewrap/)
    const none = setup('[shell]\nsandbox = "none"\n')
    expect(find(await doctor(none), "sandbox")).toMatchObject({ status: "ok" })

    const { io, seen } = capture()
    expect(await Cli.main(["doctor"], { OPENAI_API_KEY: "" }, io, setup('model = "openai:gpt-4.1-mini"'))).toBe(1)
    const out = seen.out
    expect(out).toMatch(/✖ model openai:gpt-4\.1-mini +OPENAI_API_KEY is not set\n +→ export OPENAI_API_KEY=/)
    expect(out).toMatch(/1 problem to fix\n$/)
  }, 60_000)
  it("after-run: the watchdog's mode, memory items, pending candidates and open incidents, read from the journal", async () => {
    const dir = setup('[watchdog]\nmode = "auto"\n[learning]\nenabled = false\n')
    expect(find(await doctor(dir), "after-run")).toMatchObject({
      status: "ok",
      detail: "watchdog: auto; no journal yet, so no memory, candidates or incidents"
    })
    const db = await journal(dir, 1, false)
    // Memory and learning write beside the tape; a real watchdog journals a real incident: a process
    // group still running after the tool call that started it ended.
    const sleeper = spawn("sleep", ["60"], { detached: true, stdio: "ignore" })
    try {
      await Effect.runPromise(
        Effect.gen(function* () {
          const store = yield* SqliteMemoryStore.make({ filename: db })
          const scope = { principal: "alice", agent: null, sessionId: null }
          yield* store.save({ ...scope, kind: "fact", text: "Alice's build id is B-7731" })
          yield* store.save({ ...scope, kind: "preference", text: "Alice prefers short answers" })
          yield* store.propose({
            ...scope,
            kind: "fact",
            text: "Alice works on the billing service",
            confidenceBps: 5_000
          })
          const processes = Processes.make()
          const release = processes.unsafeTrack(sleeper.pid!, { tool: "careless" })
          release()
          const watchdog = yield* Watchdog.make(
            { gateway: yield* Gateway.Gateway, journal: yield* Journal.Journal, processes },
            { mode: "observe" }
          )
          const [incident] = yield* watchdog.check
          expect(incident?.kind).toBe("tool_process_orphaned")
        }).pipe(
          Effect.provide(
            gatewayLayer({ model: ScriptedModel.make([]), journal: SqliteJournal.layer({ filename: db }) })
          ),
          Effect.scoped,
          Effect.provide(Logger.remove(Logger.defaultLogger))
        )
      )
    } finally {
      sleeper.kill("SIGKILL")
    }
    const check = find(await doctor(dir), "after-run")
    expect(check).toMatchObject({
      status: "warn",
      detail:
        "watchdog: auto; memory: 2 items; learning: off, 1 candidate pending review; incidents: 1 open (tool_process_orphaned)"
    })
    expect(check.fix).toMatch(/palyra incidents --open/)
  }, 60_000)
})
