/**
 * End-to-end: the real palyrad process on a free port, driven over HTTP (fetch + an SSE reader) and
 * through the real palyra CLI. Runs from the TypeScript sources (tsx), so no build is needed.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { createHmac } from "node:crypto"
import { cpSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs"
import { createServer } from "node:http"
import { createRequire } from "node:module"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { GrpcTransport, Proto } from "@palyra/transport-grpc"
import { afterEach, describe, expect, it } from "vitest"

const here = dirname(fileURLToPath(import.meta.url))
const tsx = join(dirname(createRequire(import.meta.url).resolve("tsx/package.json")), "dist/esm/index.mjs")
const bin = (name: string) => join(here, "..", "src", "bin", `${name === "palyrad" ? "palyrad-main" : name}.ts`)
const nodeArgs = ["--conditions=@palyra/source", "--import", tsx]

// biome-ignore lint/suspicious/noExplicitAny: loosely shaped JSON from the API
type Json = any

interface Daemon {
  readonly url: string
  readonly grpcUrl: string
  readonly token: string
  readonly proc: ChildProcess
  readonly stderr: () => string
  readonly stdout: () => string
  readonly exited: Promise<number | null>
}
const running: Array<Daemon> = []
afterEach(() => {
  for (const d of running.splice(0)) if (d.proc.exitCode === null) d.proc.kill("SIGKILL")
})

const startDaemon = (dir: string, args: ReadonlyArray<string> = [], env: Record<string, string> = {}) =>
  new Promise<Daemon>((resolve, reject) => {
    const proc = spawn(process.execPath, [...nodeArgs, bin("palyrad"), "--port", "0", ...args], {
      cwd: dir,
      env: { ...process.env, PALYRA_LOG_FORMAT: "json", PALYRA_GRPC_PORT: "0", ...env },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let err = ""
    let out = ""
    const exited = new Promise<number | null>((r) => proc.on("exit", (code) => r(code)))
    proc.stdout!.on("data", (d) => {
      out += d
    })
    proc.stderr!.on("data", (d) => {
      err += d
      const m = /listening on (http:\/\/[^\s]+)/.exec(err)
      const g = /Connect \(HTTP\/2\): (http:\/\/[^\s]+)/.exec(err)
      if (m && g) {
        const token = readFileSync(join(dir, ".palyra", "admin.token"), "utf8").trim()
        const daemon = { url: m[1]!, grpcUrl: g[1]!, token, proc, stderr: () => err, stdout: () => out, exited }
        running.push(daemon)
        resolve(daemon)
      }
    })
    proc.on("exit", (code) => {
      if (!/listening on/.test(err))
        reject(Object.assign(new Error(`palyrad exited ${code}: ${err}`), { code, stderr: err }))
    })
  })

const api = (d: Daemon) => ({
  get: async (path: string): Promise<Json> =>
    (await fetch(`${d.url}${path}`, { headers: { authorization: `Bearer ${d.token}` } })).json(),
  post: async (path: string, body: unknown): Promise<Response> =>
    fetch(`${d.url}${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${d.token}`, "content-type": "application/json" },
      body: JSON.stringify(body)
    })
})

async function* sse(response: Response): AsyncGenerator<{ id: number; event: Json }> {
  const reader = response.body!.getReader()
  const decoder = new TextDecoder()
  let buffer = ""
  while (true) {
    const { done, value } = await reader.read()
    if (done) return
    buffer += decoder.decode(value, { stream: true })
    let cut = buffer.indexOf("\n\n")
    while (cut >= 0) {
      const frame = buffer.slice(0, cut)
      buffer = buffer.slice(cut + 2)
      cut = buffer.indexOf("\n\n")
      const id = /^id: (\d+)$/m.exec(frame)?.[1]
      const data = /^data: (.*)$/m.exec(frame)?.[1]
      if (id && data) yield { id: Number(id), event: JSON.parse(data) }
    }
  }
}

const waitFor = async <A>(f: () => Promise<A | undefined>, what: string, ms = 15_000): Promise<A> => {
  const end = Date.now() + ms
  while (Date.now() < end) {
    const v = await f()
    if (v !== undefined) return v
    await new Promise((r) => setTimeout(r, 50))
  }
  throw new Error(`timed out waiting for ${what}`)
}

const runCli = (dir: string, args: ReadonlyArray<string>, input?: string, env: Record<string, string> = {}) =>
  new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
    const proc = spawn(process.execPath, [...nodeArgs, bin("palyra"), ...args], {
      cwd: dir,
      env: { ...process.env, ...env },
      stdio: ["pipe", "pipe", "pipe"]
    })
    let out = ""
    let err = ""
    proc.stdout!.on("data", (d) => {
      out += d
      if (input !== undefined && /approve\? /.test(out) && !proc.stdin!.writableEnded) proc.stdin!.end(input)
    })
    proc.stderr!.on("data", (d) => (err += d))
    if (input === undefined) proc.stdin!.end()
    proc.on("exit", (code) => resolve({ code, out, err }))
  })

const fresh = () => mkdtempSync(join(tmpdir(), "palyrad-e2e-"))

describe("palyrad end to end", () => {
  it("a chat with an approved tool over HTTP + SSE; the file lands in the workspace", async () => {
    const dir = fresh()
    const d = await startDaemon(dir)
    expect((await fetch(`${d.url}/healthz`)).status).toBe(200)
    const response = await api(d).post("/v1/runs?stream=true", { text: "please write a note", sessionKey: "e2e" })
    const seen: Array<Json> = []
    for await (const { event } of sse(response)) {
      seen.push(event)
      if (event._tag === "ApprovalRequested") {
        const r = await api(d).post(`/v1/approvals/${event.approvalId}`, { decision: "approve" })
        expect(r.status).toBe(200)
      }
      if (event._tag === "RunStateChanged" && event.to === "Done") break
    }
    expect(seen.find((e) => e._tag === "ToolResult")?.status).toBe("ok")
    expect(readFileSync(join(dir, "workspace", "notes", "palyra-demo.txt"), "utf8")).toMatch(/Palyra demo/)
    expect((await api(d).get("/v1/journal/verify")).ok).toBe(true)
  }, 60_000)

  it("the CLI chats, asks y/n in the terminal, and verifies the journal; refuses a wrong token", async () => {
    const dir = fresh()
    const d = await startDaemon(dir)
    const env = { PALYRA_URL: d.url }
    const yes = await runCli(dir, ["chat", "write a note please"], "y\n", env)
    expect(yes.code).toBe(0)
    expect(yes.out).toMatch(/approval needed: fs\.write/)
    expect(yes.out).toMatch(/\[tool\] fs\.write: ok/)
    const no = await runCli(dir, ["chat", "write it again"], "n\n", env)
    expect(no.out).toMatch(/\[tool\] fs\.write: denied/)
    const verify = await runCli(dir, ["journal", "verify"], undefined, env)
    expect(verify.code).toBe(0)
    expect(verify.out).toMatch(/hash chain intact/)
    const status = await runCli(dir, ["status"], undefined, env)
    expect(status.out).toMatch(/ready/)
    const wrong = await runCli(dir, ["sessions", "list", "--token", "not-the-token-at-all"], undefined, env)
    expect(wrong.code).toBe(4)
    expect(wrong.err).toMatch(/refused the token/)
    const down = await runCli(dir, ["status"], undefined, { PALYRA_URL: "http://127.0.0.1:1" })
    expect(down.code).toBe(3)
  }, 90_000)

  it("serves gRPC beside HTTP: health without a token, a message with one", async () => {
    const d = await startDaemon(fresh())
    const client = GrpcTransport.makeClient({ baseUrl: d.grpcUrl, token: d.token })
    expect((await client.health.check({})).status).toBe(1)
    const sent = await client.gateway.routeMessage({ target: { sessionKey: "grpc-e2e" }, text: "what time is it" })
    const run = await waitFor(async () => {
      const r = await client.gateway.getRun({ runId: sent.runId })
      return r.run?.state === Proto.RunState.DONE ? r.run : undefined
    }, "the gRPC-started run to finish")
    expect(run.sessionId).toBe(sent.sessionId)
    const wrong = GrpcTransport.makeClient({ baseUrl: d.grpcUrl, token: "not-the-token-0123456" })
    await expect(wrong.sessions.listSessions({})).rejects.toMatchObject({ code: 16 })
  }, 60_000)

  it("requests without a token or with a wrong token are refused", async () => {
    const d = await startDaemon(fresh())
    for (const headers of [{}, { authorization: "Bearer wrong" }]) {
      const r = await fetch(`${d.url}/v1/sessions`, { headers })
      expect(r.status).toBe(401)
      expect(((await r.json()) as Json).code).toBe("unauthenticated")
    }
  }, 60_000)

  it("resumes the SSE stream with Last-Event-ID", async () => {
    const d = await startDaemon(fresh())
    const sent: Json = await (await api(d).post("/v1/runs", { text: "what time is it", sessionKey: "resume" })).json()
    const run = await waitFor(async () => {
      const r = await api(d).get(`/v1/runs/${sent.runId}`)
      return r.state === "Done" ? r : undefined
    }, "the run to finish")
    expect(run.state).toBe("Done")
    const tape: Array<Json> = await api(d).get(`/v1/sessions/${sent.sessionId}/tape`)
    const from = 4
    const response = await fetch(`${d.url}/v1/sessions/${sent.sessionId}/events`, {
      headers: { authorization: `Bearer ${d.token}`, "last-event-id": String(from) }
    })
    const got: Array<Json> = []
    for await (const { id, event } of sse(response)) {
      got.push(event)
      if (id === tape.at(-1).tapeSeq) break
    }
    expect(got).toEqual(tape.slice(from))
  }, 60_000)

  it("SIGTERM during a run exits cleanly (code 0); after restart the run is marked interrupted and the journal verifies", async () => {
    const dir = fresh()
    const d = await startDaemon(dir)
    const response = await api(d).post("/v1/runs?stream=true", { text: "sleep 30", sessionKey: "slow" })
    let runId = ""
    for await (const { event } of sse(response)) {
      runId = event.runId ?? runId
      if (event._tag === "ApprovalRequested")
        await api(d).post(`/v1/approvals/${event.approvalId}`, { decision: "approve" })
      if (event._tag === "ToolStarted") break
    }
    const started = Date.now()
    d.proc.kill("SIGTERM")
    expect(await d.exited).toBe(0)
    expect(Date.now() - started).toBeLessThan(10_000)
    const again = await startDaemon(dir)
    const run = await api(again).get(`/v1/runs/${runId}`)
    expect(run.state).toBe("Failed")
    expect(run.error.code).toBe("interrupted")
    expect((await api(again).get("/v1/journal/verify")).ok).toBe(true)
  }, 90_000)

  it("a run waiting for approval survives kill -9 and continues once approved after restart", async () => {
    const dir = fresh()
    const d = await startDaemon(dir)
    const response = await api(d).post("/v1/runs?stream=true", { text: "write a note", sessionKey: "durable" })
    let approvalId = ""
    let runId = ""
    for await (const { event } of sse(response)) {
      if (event._tag === "ApprovalRequested") {
        approvalId = event.approvalId
        runId = event.runId
        break
      }
    }
    d.proc.kill("SIGKILL")
    await d.exited
    const again = await startDaemon(dir)
    expect((await api(again).get(`/v1/runs/${runId}`)).state).toBe("WaitingForApproval")
    const approved = await api(again).post(`/v1/approvals/${approvalId}`, { decision: "approve", scope: "once" })
    expect(approved.status).toBe(200)
    const done = await waitFor(async () => {
      const r = await api(again).get(`/v1/runs/${runId}`)
      return r.state === "Done" ? r : undefined
    }, "the resumed run to finish")
    expect(done.state).toBe("Done")
    expect(readFileSync(join(dir, "workspace", "notes", "palyra-demo.txt"), "utf8")).toMatch(/Palyra demo/)
    expect((await api(again).get("/v1/journal/verify")).ok).toBe(true)
  }, 90_000)

  it("a bad configuration fails at start-up with a message naming the key", async () => {
    const dir = fresh()
    writeFileSync(join(dir, "palyra.toml"), `model = "demo:scripted"\n[approvals]\ntimeout_seconds = "soon"\n`)
    const failure = await startDaemon(dir).then(
      () => undefined,
      (e: { code: number; stderr: string }) => e
    )
    expect(failure?.code).toBe(2)
    expect(failure?.stderr).toMatch(/approvals\.timeout_seconds/)
    writeFileSync(join(dir, "palyra.toml"), `modle = "typo"\n`)
    const typo = await startDaemon(dir).then(
      () => undefined,
      (e: { stderr: string }) => e
    )
    expect(typo?.stderr).toMatch(/modle: unknown setting/)
    const badModel = await startDaemon(fresh(), ["--model", "openai:gpt-4.1-mini"], { OPENAI_API_KEY: "" }).then(
      () => undefined,
      (e: { stderr: string }) => e
    )
    expect(badModel?.stderr).toMatch(/OPENAI_API_KEY/)
  }, 60_000)

  it("[[agents]] and [[bindings]]: each agent answers with its own tools; a bad agent config refuses to start", async () => {
    const dir = fresh()
    writeFileSync(
      join(dir, "palyra.toml"),
      [
        "[[agents]]",
        'id = "clock"',
        'description = "Tells the time"',
        'tools = ["time.now"]',
        "[agents.budgets]",
        "max_model_turns = 4",
        "[agents.routing]",
        "threshold = 0.5",
        'model = ["demo:scripted"]',
        "[[agents]]",
        'id = "lister"',
        'tools = ["fs.list"]',
        "[[bindings]]",
        'channel = "ops-desk"',
        'agent = "lister"'
      ].join("\n")
    )
    const d = await startDaemon(dir)
    const agents: Array<Json> = await api(d).get("/v1/agents")
    expect(agents.map((a) => [a.id, a.tools, a.routingThreshold])).toEqual([
      ["default", expect.arrayContaining(["time.now", "fs.list", "fs.write", "shell.exec"]), null],
      ["clock", ["time.now"], 0.5],
      ["lister", ["fs.list"], null]
    ])
    // The clock agent has time.now: the demo model calls it.
    const streamed = await api(d).post("/v1/runs?stream=true", { text: "what time is it", agent: "clock" })
    const seen: Array<Json> = []
    for await (const { event } of sse(streamed)) {
      seen.push(event)
      if (event._tag === "RunStateChanged" && ["Done", "Failed"].includes(event.to)) break
    }
    const request = seen.find((e) => e._tag === "ModelRequest")
    expect(request.tools).toEqual(["time.now"])
    expect(request.routing).toMatchObject({ agent: "clock", rule: "primary", candidates: ["demo:scripted"] })
    expect(seen.find((e) => e._tag === "ToolResult")).toMatchObject({ tool: "time.now", status: "ok" })
    // A message on the bound channel names no agent: the binding gives it the lister, which has no clock.
    const accepted = await api(d).post("/v1/runs", { text: "what time is it", channel: "ops-desk" })
    expect(accepted.status).toBe(202)
    const { sessionId, runId } = (await accepted.json()) as Json
    await waitFor(async () => ((await api(d).get(`/v1/runs/${runId}`)).state === "Done" ? true : undefined), "run")
    expect((await api(d).get(`/v1/sessions/${sessionId}`)).agentId).toBe("lister")
    const tape: Array<Json> = await api(d).get(`/v1/sessions/${sessionId}/tape`)
    expect(tape.find((e) => e._tag === "ModelRequest").tools).toEqual(["fs.list"])
    expect(tape.some((e) => e._tag === "ToolProposed")).toBe(false)
    expect((await api(d).get("/v1/journal/verify")).ok).toBe(true)

    const bad = fresh()
    writeFileSync(join(bad, "palyra.toml"), '[[bindings]]\nchannel = "x"\nagent = "ghost"\n')
    const unbound = await startDaemon(bad).then(
      () => undefined,
      (e: { code: number; stderr: string }) => e
    )
    expect(unbound?.code).toBe(2)
    expect(unbound?.stderr).toMatch(/bindings\.0\.agent: no agent ghost/)
    writeFileSync(join(bad, "palyra.toml"), '[[agents]]\nid = "a"\ntools = ["time.later"]\n')
    const unknownTool = await startDaemon(bad).then(
      () => undefined,
      (e: { stderr: string }) => e
    )
    expect(unknownTool?.stderr).toMatch(/agent a: unknown tool \\?"time\.later\\?"/)
  }, 90_000)

  it("plugins_dir: plugins load at start-up (logged with their digests); a bad one stops it, naming the file", async () => {
    const dir = fresh()
    const example = fileURLToPath(new URL("../../plugins/examples/word-count", import.meta.url))
    cpSync(example, join(dir, "plugins", "word-count"), { recursive: true })
    writeFileSync(join(dir, "palyra.toml"), `plugins_dir = "plugins"\n`)
    const daemon = await startDaemon(dir)
    expect(daemon.stdout()).toMatch(/plugins loaded.*plugin\.word-count@[0-9a-f]{16}/)
    daemon.proc.kill("SIGTERM")
    expect(await daemon.exited).toBe(0)
    writeFileSync(join(dir, "plugins", "word-count", "plugin.json"), `{ "name": "word-count" }`)
    const failure = await startDaemon(dir).then(
      () => undefined,
      (e: { code: number; stderr: string }) => e
    )
    expect(failure?.code).toBe(1)
    expect(failure?.stderr).toMatch(/palyrad: plugin .*plugins\/word-count\/plugin\.json: .*description/)
  }, 60_000)

  it("a [[channels]] signed webhook reaches the agent and its answer comes back signed", async () => {
    const secret = "s".repeat(16) + "3cr3t-0123456789abcdef"
    const replies: Array<{ body: Json; signature: string | undefined }> = []
    const receiver = createServer((req, res) => {
      let body = ""
      req.on("data", (c) => (body += c))
      req.on("end", () => {
        replies.push({ body: JSON.parse(body), signature: req.headers["x-palyra-signature"] as string | undefined })
        res.writeHead(200, { "content-type": "application/json" }).end('{"id":"r1"}')
      })
    })
    await new Promise<void>((r) => receiver.listen(0, "127.0.0.1", () => r()))
    const port = await freePort()
    const dir = fresh()
    writeFileSync(
      join(dir, "palyra.toml"),
      `[[channels]]\nkind = "webhook"\nname = "hooks"\nsigning_secret = "${secret}"\nlisten_port = ${port}\n` +
        `dm_policy = "allow"\ncallback_url = "http://127.0.0.1:${(receiver.address() as AddressInfo).port}/reply"\n`
    )
    try {
      await startDaemon(dir)
      const body = JSON.stringify({
        channel: "hooks",
        account: "acct",
        conversation: "dm-1",
        sender: { id: "user-7", verified: true },
        platformMessageId: "m-1",
        text: "what time is it",
        attachments: [],
        isDirect: true,
        mentions: [],
        receivedAt: Date.now()
      })
      const ts = Math.floor(Date.now() / 1000)
      const sign = (t: number) => `v1=${createHmac("sha256", secret).update(`${t}.`).update(body).digest("hex")}`
      const post = (signature: string) =>
        fetch(`http://127.0.0.1:${port}/inbound`, {
          method: "POST",
          headers: {
            "content-type": "application/json",
            "x-palyra-timestamp": String(ts),
            "x-palyra-signature": signature
          },
          body
        })
      expect((await post(sign(ts + 1))).status).toBe(401)
      expect((await post(sign(ts))).status).toBe(202)
      const reply = await waitFor(async () => replies[0], "a reply on the callback")
      expect(reply.signature).toMatch(/^v1=[0-9a-f]{64}$/)
      // The demo agent called time.now (a low-risk tool, allowed by the default Cedar policies).
      expect(reply.body).toMatchObject({ channel: "hooks", conversation: "dm-1", replyTo: "m-1" })
      expect(reply.body.text).toMatch(/time\.now returned:[\s\S]*"iso":"\d{4}-\d{2}-\d{2}T/)
    } finally {
      receiver.close()
    }
  })
})

const freePort = () =>
  new Promise<number>((resolve) => {
    const probe = createServer()
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address() as AddressInfo
      probe.close(() => resolve(port))
    })
  })
