/**
 * The daemon's after-run life through a real palyrad process (from the sources, like every daemon
 * test) and the real `palyra` CLI, with the model served by a local OpenAI-compatible server that
 * records every request it gets (the prompt the model really received):
 *
 * - a finished run is reflected on by the background worker: one candidate applied by threshold,
 *   one pending, listed by `palyra learning list --json` and accepted over HTTP; another principal
 *   gets 404 for it; the fact reaches a later session's prompt of the same principal, never
 *   another principal's;
 * - a reflection task whose daemon is SIGKILLed mid-run is retried after the restart and
 *   completes once;
 * - a stuck tool raises an incident (`palyra incidents --json`) and, in `auto` mode, the run is
 *   cancelled.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { readFileSync, writeFileSync } from "node:fs"
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { join } from "node:path"
import { afterAll, afterEach, describe, expect, it } from "vitest"
import { bin, cleanEnv, fresh, nodeArgs, runCli, stopDaemons } from "./support.js"

// biome-ignore lint/suspicious/noExplicitAny: JSON from the API, checked field by field
type Json = any

const asJson = (value: unknown): Json => value

const REFLECTION = "You review a finished conversation"

/** An OpenAI-compatible chat-completions server; `answer` decides each reply (or holds it). */
const modelServer = async (
  answer: (request: Json) => { readonly text?: string; readonly tool?: { name: string; args: unknown } } | "hold"
) => {
  const requests: Array<Json> = []
  const embeddings: Array<string> = []
  const held: Array<ServerResponse> = []
  const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
    `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = ""
    req.on("data", (d) => (body += d))
    req.on("end", () => {
      const request = JSON.parse(body || "{}") as Json
      if (req.url === "/v1/embeddings") {
        embeddings.push(...(request.input as Array<string>))
        res.writeHead(200, { "content-type": "application/json" })
        return res.end(
          JSON.stringify({
            object: "list",
            model: request.model,
            data: (request.input as Array<string>).map((t, index) => ({
              object: "embedding",
              index,
              embedding: concepts(t)
            })),
            usage: { prompt_tokens: 1, total_tokens: 1 }
          })
        )
      }
      requests.push(request)
      const reply = answer(request)
      res.writeHead(200, { "content-type": "text/event-stream" })
      if (reply === "hold") {
        held.push(res)
        res.write(chunk({ role: "assistant", content: "" }))
        return
      }
      if (reply.tool) {
        res.write(chunk({ role: "assistant", content: null }))
        res.write(
          chunk({
            tool_calls: [
              {
                index: 0,
                id: `call-${requests.length}`,
                type: "function",
                function: { name: reply.tool.name, arguments: JSON.stringify(reply.tool.args) }
              }
            ]
          })
        )
        res.write(chunk({}, "tool_calls"))
      } else {
        res.write(chunk({ role: "assistant", content: "" }))
        res.write(chunk({ content: reply.text ?? "ok" }))
        res.write(chunk({}, "stop"))
      }
      res.end("data: [DONE]\n\n")
    })
  })
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()))
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`
  return {
    url,
    requests,
    embeddings,
    close: () => {
      for (const res of held) res.destroy()
      server.closeAllConnections()
      server.close()
    }
  }
}

/** A small embedding model by concepts: words of one concept share a dimension. */
const CONCEPTS = [
  ["car", "automobile", "drive", "drives"],
  ["coffee", "espresso"]
]
const concepts = (text: string) => {
  const v = [0, 0, 0.01]
  for (const w of text.toLowerCase().split(/\W+/)) {
    const i = CONCEPTS.findIndex((c) => c.includes(w))
    if (i >= 0) v[i]! += 1
  }
  return v
}

const isReflection = (request: Json) => JSON.stringify(request.messages ?? []).includes(REFLECTION)
const lastUser = (request: Json): string => {
  const users = (request.messages ?? []).filter((m: Json) => m.role === "user")
  const content = users.at(-1)?.content
  return typeof content === "string" ? content : JSON.stringify(content ?? "")
}

interface Daemon {
  readonly url: string
  readonly token: string
  readonly proc: ChildProcess
  readonly exited: Promise<number | null>
}
const running: Array<Daemon> = []
const start = (dir: string) =>
  new Promise<Daemon>((resolve, reject) => {
    const proc = spawn(process.execPath, [...nodeArgs, bin("palyrad"), "--port", "0"], {
      cwd: dir,
      env: { ...cleanEnv(), PALYRA_LOG_FORMAT: "json", PALYRA_GRPC_PORT: "0" },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let err = ""
    const exited = new Promise<number | null>((r) => proc.on("exit", (code) => r(code)))
    proc.stdout!.on("data", () => {})
    proc.stderr!.on("data", (d) => {
      err += d
      const m = /listening on (http:\/\/[^\s]+)/.exec(err)
      if (m && /Connect \(HTTP\/2\)/.test(err)) {
        const token = readFileSync(join(dir, ".palyra", "admin.token"), "utf8").trim()
        const daemon = { url: m[1]!, token, proc, exited }
        running.push(daemon)
        resolve(daemon)
      }
    })
    proc.on("exit", (code) => {
      if (!/listening on/.test(err)) reject(new Error(`palyrad exited ${code}: ${err}`))
    })
  })
afterEach(() => {
  for (const d of running.splice(0)) if (d.proc.exitCode === null) d.proc.kill("SIGKILL")
})
afterAll(stopDaemons)

const http = (d: Daemon, token = d.token) => ({
  get: async (path: string) => fetch(`${d.url}${path}`, { headers: { authorization: `Bearer ${token}` } }),
  post: async (path: string, body: unknown = {}) =>
    fetch(`${d.url}${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify(body)
    })
})

const waitFor = async <A>(f: () => Promise<A | undefined>, what: string, ms = 30_000): Promise<A> => {
  const end = Date.now() + ms
  while (Date.now() < end) {
    const v = await f()
    if (v !== undefined) return v
    await new Promise((r) => setTimeout(r, 100))
  }
  throw new Error(`timed out waiting for ${what}`)
}

const runDone = async (d: Daemon, token: string, text: string, sessionKey: string) => {
  const accepted = await (await http(d, token).post("/v1/runs", { text, sessionKey })).json().then(asJson)
  expect(accepted.runId).toBeDefined()
  return waitFor(async () => {
    const run = await (await http(d, token).get(`/v1/runs/${accepted.runId}`)).json().then(asJson)
    return ["Done", "Failed", "Cancelled"].includes(run.state) ? run : undefined
  }, `run ${accepted.runId} to end`)
}

const ALICE = "alice-token-0123456789abcdef"
const BOB = "bob-token-0123456789abcdefgh"
const config = (modelUrl: string, extra: string) =>
  `model = "openai-compatible:${modelUrl}#m"

[[auth.tokens]]
token = "${ALICE}"
principal = "alice"

[[auth.tokens]]
token = "${BOB}"
principal = "bob"

${extra}
`

describe("palyrad's after-run life", () => {
  it("reflection after a run: one candidate applied, one pending (palyra learning list --json), accepted over HTTP; memory reaches the same principal's later prompt only", async () => {
    const model = await modelServer(() => ({ text: "Noted." }))
    try {
      const dir = fresh("palyra-afterrun-")
      writeFileSync(join(dir, "palyra.toml"), config(model.url, `[learning]\nmodel = "deterministic"\n`))
      const d = await start(dir)
      const taught = await runDone(
        d,
        ALICE,
        "Remember that the staging database listens on port 5433. I usually deploy on Fridays.",
        "a1"
      )
      expect(taught.state).toBe("Done")

      const cli = (token: string, args: ReadonlyArray<string>) =>
        runCli(dir, args, { env: { PALYRA_URL: d.url, PALYRA_TOKEN: token } })
      const pending = await waitFor(async () => {
        const r = await cli(ALICE, ["learning", "list", "--json"])
        expect(r.code).toBe(0)
        const list = JSON.parse(r.out) as Array<Json>
        return list.length > 0 ? list : undefined
      }, "a pending candidate")
      expect(pending.map((c) => [c.kind, c.text, c.confidenceBps, c.principal, c.sourceRunId])).toEqual([
        ["preference", "The user usually deploy on Fridays", 6000, "alice", taught.id]
      ])
      // Applied by threshold (9,500 ≥ 8,000): in alice's memory.
      const found = await cli(ALICE, ["memory", "search", "staging", "database", "--json"])
      expect(found.code).toBe(0)
      const [hit] = JSON.parse(found.out) as Array<Json>
      expect(hit.item.text).toBe("The staging database listens on port 5433")
      expect(hit.item.sourceRunId).toBe(taught.id)
      // The reflection ran as a background task (operators see it).
      const tasks = JSON.parse((await cli(d.token, ["tasks", "list", "--json"])).out) as Array<Json>
      expect(tasks.map((t) => [t.kind, t.state, t.payload?.runId])).toContainEqual([
        "memory.reflect",
        "succeeded",
        taught.id
      ])
      // Not bob's: his list is empty and accepting it is 404, as if it did not exist.
      expect(JSON.parse((await cli(BOB, ["learning", "list", "--json"])).out)).toEqual([])
      const refused = await http(d, BOB).post(`/v1/learning/candidates/${pending[0].id}/accept`)
      expect(refused.status).toBe(404)
      expect((await refused.json().then(asJson)).code).toBe("not_found")
      expect((await cli(BOB, ["tasks", "list", "--json"])).code).toBe(1)
      // Alice accepts over HTTP: it becomes a memory item.
      const accepted = await http(d, ALICE).post(`/v1/learning/candidates/${pending[0].id}/accept`)
      expect(accepted.status).toBe(200)
      const decided = await accepted.json().then(asJson)
      expect(decided.candidate.status).toBe("accepted")
      expect(decided.item.text).toBe("The user usually deploy on Fridays")
      expect(JSON.parse((await cli(ALICE, ["learning", "list", "--json"])).out)).toEqual([])

      // Session B of alice: the fact is in the prompt the model received, fenced as untrusted.
      const recalled = await runDone(d, ALICE, "Which port does the staging database use?", "a2")
      expect(recalled.state).toBe("Done")
      await runDone(d, BOB, "Which port does the staging database use?", "b1")
      const asked = model.requests.filter((r) => !isReflection(r) && lastUser(r).includes("Which port"))
      expect(asked).toHaveLength(2)
      const [toAlice, toBob] = asked
      const aliceSystem = JSON.stringify(toAlice.messages.filter((m: Json) => m.role === "system"))
      expect(aliceSystem).toContain('<memory untrusted=\\"true\\">')
      expect(aliceSystem).toContain("The staging database listens on port 5433")
      expect(JSON.stringify(toBob.messages)).not.toContain("5433")
      // The memory tools are offered to the model.
      expect(toAlice.tools.map((t: Json) => t.function.name)).toEqual(
        expect.arrayContaining(["memory_search", "memory_save"])
      )
      // Forgetting: bob cannot (404), alice can.
      expect((await cli(BOB, ["memory", "forget", hit.item.id])).code).toBe(1)
      const forgot = await cli(ALICE, ["memory", "forget", hit.item.id, "--json"])
      expect(JSON.parse(forgot.out)).toEqual({ forgotten: hit.item.id })
    } finally {
      model.close()
    }
  }, 180_000)

  it("a reflection task whose daemon is SIGKILLed mid-run is retried after the restart and completes once", async () => {
    let reflections = 0
    const model = await modelServer((request) => {
      if (!isReflection(request)) return { text: "Sure." }
      reflections++
      // The first reflection never answers: the daemon is killed while it waits.
      if (reflections === 1) return "hold"
      return { text: '[{"kind":"fact","text":"The build server is called ci-7","confidenceBps":9000}]' }
    })
    try {
      const dir = fresh("palyra-afterrun-kill-")
      writeFileSync(
        join(dir, "palyra.toml"),
        config(model.url, `[learning]\nmodel = "session"\n\n[tasks]\nlease_seconds = 2\n\n[watchdog]\nmode = "off"\n`)
      )
      const first = await start(dir)
      const run = await runDone(first, ALICE, "Our build server is ci-7.", "k1")
      await waitFor(async () => (reflections >= 1 ? true : undefined), "the first reflection request")
      const task = await waitFor(async () => {
        const list = (await (await http(first).get("/v1/tasks?state=running")).json().then(asJson)) as Array<Json>
        return list.find((t) => t.kind === "memory.reflect")
      }, "a running reflection task")
      expect(task.payload.runId).toBe(run.id)
      first.proc.kill("SIGKILL")
      await first.exited

      const second = await start(dir)
      const done = await waitFor(async () => {
        const t = await (await http(second).get("/v1/tasks?state=succeeded")).json().then(asJson)
        return (t as Array<Json>).find((x) => x.id === task.id)
      }, "the reflection task to succeed after the restart")
      // The killed attempt counts; the retry completed it.
      expect(done.attempts).toBe(2)
      expect(reflections).toBe(2)
      // Completed once: one memory item, one reflection note on the run's session.
      const hits = (await (
        await http(second, ALICE).get("/v1/memory?q=build%20server")
      )
        .json()
        .then(asJson)) as Array<Json>
      expect(hits.map((h) => h.item.text)).toEqual(["The build server is called ci-7"])
      const tape = (await (
        await http(second, ALICE).get(`/v1/sessions/${run.sessionId}/tape`)
      )
        .json()
        .then(asJson)) as Array<Json>
      const notes = tape.filter(
        (e) => e._tag === "SessionNote" && e.author === "learning" && e.text.startsWith("reflected")
      )
      expect(notes).toHaveLength(1)
      expect(notes[0].text).toContain("(model extractor)")
      // Give a stale worker no chance to complete it twice: still one after another lease period.
      await new Promise((r) => setTimeout(r, 2_500))
      expect(reflections).toBe(2)
    } finally {
      model.close()
    }
  }, 180_000)

  it("a stuck tool raises an incident (palyra incidents --json); in auto mode the run is cancelled", async () => {
    const model = await modelServer((request) => {
      const tools = (request.tools ?? []).map((t: Json) => t.function?.name as string)
      const shell = tools.find((n: string) => n.startsWith("shell"))
      const answered = (request.messages ?? []).some((m: Json) => m.role === "tool")
      if (lastUser(request).includes("wait") && shell && !answered) {
        return { tool: { name: shell, args: { argv: ["sleep", "120"] } } }
      }
      return { text: "done" }
    })
    try {
      const dir = fresh("palyra-afterrun-stuck-")
      writeFileSync(
        join(dir, "palyra.toml"),
        config(
          model.url,
          `[shell]\nsandbox = "none"\ntimeout_seconds = 300\n\n[watchdog]\nmode = "auto"\ninterval_seconds = 1\nrun_stall_seconds = 2\n`
        )
      )
      const d = await start(dir)
      // Stream the run (a connected approval channel) and approve the tool call when asked.
      const response = await http(d).post("/v1/runs?stream=true", { text: "please wait for me", sessionKey: "stuck" })
      const reader = response.body!.getReader()
      const decoder = new TextDecoder()
      let buffer = ""
      let final: string | undefined
      let runId: string | undefined
      while (final === undefined) {
        const { done, value } = await reader.read()
        if (done) break
        buffer += decoder.decode(value, { stream: true })
        let cut = buffer.indexOf("\n\n")
        while (cut >= 0) {
          const data = /^data: (.*)$/m.exec(buffer.slice(0, cut))?.[1]
          buffer = buffer.slice(cut + 2)
          cut = buffer.indexOf("\n\n")
          if (data === undefined) continue
          const event = JSON.parse(data) as Json
          runId ??= event.runId ?? undefined
          if (event._tag === "ApprovalRequested") {
            expect((await http(d).post(`/v1/approvals/${event.approvalId}`, { decision: "approve" })).status).toBe(200)
          }
          if (event._tag === "RunStateChanged" && ["Done", "Failed", "Cancelled"].includes(event.to)) final = event.to
        }
      }
      await reader.cancel()
      // The watchdog cancelled it (the tool would have slept for two minutes).
      expect(final).toBe("Cancelled")
      const run = await (await http(d).get(`/v1/runs/${runId}`)).json().then(asJson)
      expect(run.state).toBe("Cancelled")

      const listed = await runCli(dir, ["incidents", "--json"], { env: { PALYRA_URL: d.url } })
      expect(listed.code).toBe(0)
      const incidents = JSON.parse(listed.out) as Array<Json>
      const stalled = incidents.find((i) => i.kind === "run_stalled" && i.subject === runId)
      expect(stalled).toBeDefined()
      expect(stalled.action).toBe("cancelled")
      expect(stalled.detail).toContain("made no progress")
      // The run's tape says why.
      const tape = (await (await http(d).get(`/v1/sessions/${run.sessionId}/tape`)).json().then(asJson)) as Array<Json>
      expect(
        tape.some((e) => e._tag === "SessionNote" && e.author === "watchdog" && e.text.includes("cancelling it"))
      ).toBe(true)
      // Operators only: alice may not list incidents.
      expect((await http(d, ALICE).get("/v1/incidents")).status).toBe(403)
      // /metrics shows the incident gauge and task counts.
      const metrics = await (await http(d).get("/metrics")).text()
      expect(metrics).toMatch(/^palyra_incidents_open(\{[^}]*\})? \d+/m)
      expect(metrics).toMatch(/^palyra_tasks\{[^}]*state="queued"[^}]*\} \d+/m)
    } finally {
      model.close()
    }
  }, 180_000)
  it("with an embedding model, memory is found by meaning (palyra memory search) and injected, for its principal only", async () => {
    const model = await modelServer(() => ({ text: "Noted." }))
    try {
      const dir = fresh("palyra-afterrun-vectors-")
      writeFileSync(
        join(dir, "palyra.toml"),
        config(model.url, `[memory]\nembedding_model = "openai-compatible:${model.url}#concepts"\n`)
      )
      const d = await start(dir)
      await runDone(d, ALICE, "Remember that I own an old automobile.", "v1")
      const cli = (token: string, args: ReadonlyArray<string>) =>
        runCli(dir, args, { env: { PALYRA_URL: d.url, PALYRA_TOKEN: token } })
      // "car" shares no word with the fact: found through the vectors.
      const hits = await waitFor(async () => {
        const r = await cli(ALICE, ["memory", "search", "car", "--json"])
        const list = JSON.parse(r.out) as Array<Json>
        return list.length > 0 ? list : undefined
      }, "the fact, by meaning")
      expect(hits[0].item.text).toBe("I own an old automobile")
      expect(model.embeddings).toContain("I own an old automobile")
      expect(JSON.parse((await cli(BOB, ["memory", "search", "car", "--json"])).out)).toEqual([])
      await runDone(d, ALICE, "Which car?", "v2")
      const asked = model.requests.filter((r) => !isReflection(r) && lastUser(r).includes("Which car"))
      expect(JSON.stringify(asked[0].messages)).toContain("I own an old automobile")
    } finally {
      model.close()
    }
  }, 180_000)
})
