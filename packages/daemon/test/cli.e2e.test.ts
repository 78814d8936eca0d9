/**
 * The palyra CLI against a real palyrad (tsx, from the sources): `--json` on every list/show
 * command parses as one JSON document shaped like the API's records; approvals answered from the
 * command line become standing grants that can be revoked; usage errors exit 2; and on a terminal
 * (a pseudo-terminal from util-linux `script`) `palyra chat` shows what was typed.
 */

import { spawn } from "node:child_process"
import { Api } from "@palyra/transport-http"
import { Schema } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  bin,
  cleanEnv,
  type Daemon,
  fresh,
  nodeArgs,
  runCli,
  runOnTerminal,
  startDaemon,
  stopDaemons
} from "./support.js"

let dir: string
let daemon: Daemon
let env: Record<string, string>

beforeAll(async () => {
  dir = fresh()
  daemon = await startDaemon(dir, ["--port", "0"], { PALYRA_GRPC_PORT: "0" })
  env = { PALYRA_URL: daemon.url }
}, 60_000)
afterAll(stopDaemons)

/** stdout must be exactly one JSON document (nothing before or after), decoded with the contract's schema. */
const parsed = <A, I>(schema: Schema.Schema<A, I>, out: string): A => Schema.decodeUnknownSync(schema)(JSON.parse(out))

describe("palyra --json", () => {
  it("status, sessions list/show, journal tail/verify: one JSON document each, in the API's shape", async () => {
    const chat = await runCli(dir, ["chat", "what time is it", "--session-key", "json-test"], { env })
    expect(chat.code).toBe(0)

    const status = await runCli(dir, ["status", "--json"], { env })
    expect(status.code).toBe(0)
    expect(JSON.parse(status.out)).toEqual({ url: daemon.url, ready: true, sessions: 1, pendingApprovals: 0 })

    const list = await runCli(dir, ["sessions", "list", "--json"], { env })
    expect(list.code).toBe(0)
    const sessions = parsed(Schema.Array(Api.Session), list.out)
    expect(sessions.map((s) => s.key)).toEqual(["json-test"])
    const id = sessions[0]!.id

    const show = await runCli(dir, ["sessions", "show", id, "--json"], { env })
    const shown = parsed(Schema.Struct({ session: Api.Session, tape: Schema.Array(Api.TapeEventRecord) }), show.out)
    expect(shown.session.id).toBe(id)
    expect(shown.tape.map((e) => e.tapeSeq)).toEqual(shown.tape.map((_, i) => i + 1))
    expect(shown.tape.find((e) => e._tag === "UserMessage")).toMatchObject({ text: "what time is it" })

    const tail = await runCli(dir, ["journal", "tail", id, "--json"], { env })
    expect(parsed(Schema.Array(Api.TapeEventRecord), tail.out)).toEqual(shown.tape)

    const verify = await runCli(dir, ["journal", "verify", "--json"], { env })
    expect(verify.code).toBe(0)
    expect(parsed(Api.VerifyResult, verify.out)).toEqual({ ok: true, checked: shown.tape.length })

    // Text output stays human: not JSON.
    const text = await runCli(dir, ["sessions", "list"], { env })
    expect(text.out).toContain(`${id}  json-test`)
    expect(() => JSON.parse(text.out)).toThrow()
  }, 90_000)

  it("an approval answered from the command line: approvals list/approve and grants list/revoke, all --json", async () => {
    // A streamed run keeps an approval channel open while the CLI answers from another process.
    const response = await fetch(`${daemon.url}/v1/runs?stream=true`, {
      method: "POST",
      headers: { authorization: `Bearer ${daemon.token}`, "content-type": "application/json" },
      body: JSON.stringify({ text: "please write a note", sessionKey: "grant-test" })
    })
    const reader = response.body!.getReader()
    let seen = ""
    while (!seen.includes("event: ApprovalRequested")) {
      const { value, done } = await reader.read()
      if (done) throw new Error("the run ended without asking")
      seen += new TextDecoder().decode(value)
    }
    const pending = await runCli(dir, ["approvals", "list", "--json"], { env })
    const approvals = parsed(Schema.Array(Api.ApprovalRecord), pending.out)
    expect(approvals).toHaveLength(1)
    expect(approvals[0]).toMatchObject({ tool: "fs.write", status: "pending" })

    const approve = await runCli(
      dir,
      ["approvals", "approve", approvals[0]!.id, "--scope", "always", "--max-uses", "3", "--json"],
      { env }
    )
    expect(approve.code).toBe(0)
    expect(parsed(Api.ApprovalRecord, approve.out)).toMatchObject({
      status: "approved",
      scope: "always",
      grantMaxUses: 3
    })
    await reader.cancel()

    const grants = parsed(Schema.Array(Api.Grant), (await runCli(dir, ["grants", "list", "--json"], { env })).out)
    expect(grants.map((g) => g.id)).toEqual([approvals[0]!.id])
    expect(grants[0]!.policy).toMatch(/permit/)

    const revoked = await runCli(dir, ["grants", "revoke", approvals[0]!.id, "--json"], { env })
    expect(parsed(Api.Grant, revoked.out).status).toBe("revoked")
    const after = parsed(Schema.Array(Api.Grant), (await runCli(dir, ["grants", "list", "--json"], { env })).out)
    expect(after.map((g) => [g.id, g.status])).toEqual([[approvals[0]!.id, "revoked"]])
    expect(JSON.parse((await runCli(dir, ["approvals", "list", "--json"], { env })).out)).toEqual([])
  }, 90_000)

  it("agents list --json; chat --agent names the agent (an unknown one is the API's invalid_argument)", async () => {
    const agents = parsed(Schema.Array(Api.AgentInfo), (await runCli(dir, ["agents", "list", "--json"], { env })).out)
    expect(agents.map((a) => a.id)).toContain("default")
    const named = await runCli(dir, ["chat", "what time is it", "--agent", "default", "--session-key", "agent"], {
      env
    })
    expect(named.code).toBe(0)
    const unknown = await runCli(dir, ["chat", "hello", "--agent", "nobody", "--session-key", "agent-2"], { env })
    expect(unknown.code).toBe(1)
    expect(unknown.err).toMatch(/^palyra: invalid_argument: .*nobody/m)
  }, 90_000)

  it("usage errors exit 2; a missing session is the API's not_found (exit 1); no token at all exits 4", async () => {
    expect((await runCli(dir, ["sessions", "show", "not-a-ulid"], { env })).code).toBe(2)
    expect((await runCli(dir, ["sessions", "frobnicate"], { env })).code).toBe(2)
    expect((await runCli(dir, [], { env })).code).toBe(2)
    expect((await runCli(dir, ["--help"], { env })).code).toBe(0)
    const missing = await runCli(dir, ["sessions", "show", "01KA0000000000000000000000"], { env })
    expect(missing.code).toBe(1)
    expect(missing.err).toMatch(/not_found/)
    const noToken = await runCli(fresh(), ["sessions", "list"], { env })
    expect(noToken.code).toBe(4)
    expect(noToken.err).toMatch(/no token/)
  }, 90_000)
})

describe("palyra journal tail --follow", () => {
  it("prints the tape, then new events live, one JSON event per line", async () => {
    const first = await runCli(dir, ["chat", "what time is it", "--session-key", "follow"], { env })
    expect(first.code).toBe(0)
    const sessions = parsed(Schema.Array(Api.Session), (await runCli(dir, ["sessions", "list", "--json"], { env })).out)
    const id = sessions.find((s) => s.key === "follow")!.id
    const proc = spawn(process.execPath, [...nodeArgs, bin("palyra"), "journal", "tail", id, "--follow", "--json"], {
      cwd: dir,
      env: { ...cleanEnv(), ...env },
      stdio: ["ignore", "pipe", "pipe"]
    })
    const events: Array<typeof Api.TapeEventRecord.Type> = []
    let buffer = ""
    let sentSecond = false
    const decode = Schema.decodeUnknownSync(Api.TapeEventRecord)
    await new Promise<void>((resolve, reject) => {
      proc.on("exit", (code) => reject(new Error(`tail --follow exited ${code}`)))
      proc.stdout.on("data", (chunk) => {
        buffer += chunk
        const lines = buffer.split("\n")
        buffer = lines.pop() ?? ""
        for (const line of lines) events.push(decode(JSON.parse(line)))
        const done = events.filter((e) => e._tag === "RunStateChanged" && e.to === "Done").length
        if (done === 1 && !sentSecond) {
          sentSecond = true
          void runCli(dir, ["chat", "and now?", "--session-key", "follow"], { env })
        }
        if (done === 2) resolve()
      })
    }).finally(() => proc.kill())
    expect(events.map((e) => e.tapeSeq)).toEqual(events.map((_, i) => i + 1))
    expect(events.filter((e) => e._tag === "UserMessage").map((e) => (e._tag === "UserMessage" ? e.text : ""))).toEqual(
      ["what time is it", "and now?"]
    )
  }, 90_000)
})

describe("palyra chat on a terminal", () => {
  it("shows what was typed after the prompt, then the answer; an empty line ends it", async () => {
    const { code, screen } = await runOnTerminal(
      dir,
      ["chat", "--session-key", "tty"],
      [
        { when: /you ›/, type: "what time is it\r" },
        { when: /time\.now returned[\s\S]*you ›/, type: "\r" }
      ],
      env
    )
    expect(code).toBe(0)
    // The submitted prompt line keeps the text, and it comes before the assistant's answer.
    const typed = screen.search(/✔ you … what time is it/)
    expect(typed).toBeGreaterThan(-1)
    expect(screen.indexOf("assistant: Here is what time.now returned")).toBeGreaterThan(typed)
  }, 90_000)
})
