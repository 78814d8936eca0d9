/**
 * `palyra`: the command-line client of a running palyrad (over its HTTP API).
 *
 *   palyra status
 *   palyra chat [message…] [--session KEY]         stream answers; asks y/n/always for approvals
 *   palyra approvals list [--status pending]       palyra approvals approve|deny ID [--scope …] [--reason …]
 *   palyra sessions list | show ID | reset ID
 *   palyra journal tail SESSION [--follow] | verify
 *   palyra journal verify --anchor FILE [--db PATH] [--key PATH]   offline, no daemon (VerifyOffline)
 *
 * Connection: --url / PALYRA_URL (default http://127.0.0.1:7420); token: --token / PALYRA_TOKEN, else
 * the admin token file in the data dir (--data-dir / PALYRA_DATA_DIR, default ./.palyra).
 *
 * Exit codes: 0 ok · 1 the request failed · 2 usage · 3 daemon unreachable · 4 token refused.
 *
 * @since 0.1.0
 */
import { existsSync, readFileSync } from "node:fs"
import { join, resolve } from "node:path"
import { createInterface, type Interface } from "node:readline"
import * as VerifyOffline from "./VerifyOffline.js"

/** @since 0.1.0 @category Models */
export interface Io {
  readonly out: (text: string) => void
  readonly err: (text: string) => void
  readonly ask: (question: string) => Promise<string>
  readonly interactive: boolean
}

export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: number
  ) {
    super(message)
  }
}

interface Args {
  readonly positional: Array<string>
  readonly options: Record<string, string | true>
}

const parseArgs = (argv: ReadonlyArray<string>): Args => {
  const positional: Array<string> = []
  const options: Record<string, string | true> = {}
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!
    if (a.startsWith("--")) {
      const eq = a.indexOf("=")
      const name = eq > 0 ? a.slice(2, eq) : a.slice(2)
      if (eq > 0) options[name] = a.slice(eq + 1)
      else if (["follow", "yes", "no", "help", "json"].includes(name)) options[name] = true
      else {
        const v = argv[i + 1]
        if (v === undefined) throw new CliError(`--${name} needs a value`, 2)
        options[name] = v
        i++
      }
    } else positional.push(a)
  }
  return { positional, options }
}

const USAGE = `usage: palyra <command>
  status                                   is the daemon up? (no token needed for this)
  chat [message…] [--session KEY]          chat; without a message, an interactive prompt
  approvals list [--status STATUS]         pending approvals by default
  approvals approve ID [--scope once|session|always] [--reason TEXT] [--expires-in SECONDS] [--max-uses N]
  approvals deny ID [--reason TEXT]
  grants list | revoke ID                  standing approvals, each shown as the Cedar policy it amounts to
  sessions list | show ID | reset ID
  journal tail SESSION_ID [--follow]       print the tape
  journal verify                           recompute the hash chain (asks the daemon)
  journal verify --anchor FILE [--db PATH] [--key PATH]
                                           offline: the file read-only, plus its signed anchors
options: --url URL  --token TOKEN  --data-dir DIR  --yes/--no (answer approvals without asking)`

/** Run the CLI; resolves with the exit code. @since 0.1.0 @category Main */
export const main = async (
  argv: ReadonlyArray<string>,
  env: Record<string, string | undefined>,
  io: Io
): Promise<number> => {
  try {
    const args = parseArgs(argv)
    if (args.options.help || args.positional.length === 0) {
      io.out(`${USAGE}\n`)
      return args.positional.length === 0 && !args.options.help ? 2 : 0
    }
    const url = String(args.options.url ?? env.PALYRA_URL ?? "http://127.0.0.1:7420").replace(/\/$/, "")
    const client = makeClient(url, () => tokenFrom(args, env))
    const [command, sub, ...rest] = args.positional
    switch (command) {
      case "status":
        return await status(client, url, io)
      case "chat":
        return await chat(client, [sub, ...rest].filter((s): s is string => s !== undefined).join(" "), args, io)
      case "approvals":
        return await approvals(client, sub, rest, args, io)
      case "sessions":
        return await sessions(client, sub, rest, io)
      case "grants":
        return await grants(client, sub, rest, io)
      case "journal":
        if (sub === "verify" && args.options.anchor !== undefined)
          return await VerifyOffline.main(args.options, env, io)
        return await journal(client, sub, rest, args, io)
      default:
        throw new CliError(`unknown command "${command}"\n${USAGE}`, 2)
    }
  } catch (error) {
    if (error instanceof CliError) {
      io.err(`palyra: ${error.message}\n`)
      return error.exitCode
    }
    io.err(`palyra: ${error instanceof Error ? error.message : String(error)}\n`)
    return 1
  }
}

const tokenFrom = (args: Args, env: Record<string, string | undefined>): string => {
  if (typeof args.options.token === "string") return args.options.token
  if (env.PALYRA_TOKEN) return env.PALYRA_TOKEN
  const dataDir = resolve(
    String(
      args.options["data-dir"] ?? env.PALYRA_DATA_DIR ?? (env.PALYRA_HOME ? join(env.PALYRA_HOME, "data") : ".palyra")
    )
  )
  const file = join(dataDir, "admin.token")
  if (existsSync(file)) return readFileSync(file, "utf8").trim()
  throw new CliError(`no token: pass --token, set PALYRA_TOKEN, or run where ${file} exists`, 4)
}

interface Client {
  readonly request: (
    method: string,
    path: string,
    body?: unknown,
    headers?: Record<string, string>
  ) => Promise<Response>
  readonly json: <A>(method: string, path: string, body?: unknown) => Promise<A>
}

const makeClient = (url: string, token: () => string): Client => {
  const request = async (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) => {
    let response: Response
    try {
      response = await fetch(`${url}${path}`, {
        method,
        headers: {
          authorization: `Bearer ${token()}`,
          ...(body === undefined ? {} : { "content-type": "application/json" }),
          ...headers
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) })
      })
    } catch (error) {
      if (error instanceof CliError) throw error
      throw new CliError(`cannot reach palyrad at ${url} (is it running? start it with \`npm start\`)`, 3)
    }
    if (response.status === 401)
      throw new CliError("the daemon refused the token (401): check --token / PALYRA_TOKEN", 4)
    if (!response.ok) {
      const problem = (await response.json().catch(() => ({}))) as { code?: string; message?: string }
      throw new CliError(`${problem.code ?? response.status}: ${problem.message ?? response.statusText}`, 1)
    }
    return response
  }
  return { request, json: async <A>(m: string, p: string, b?: unknown) => (await (await request(m, p, b)).json()) as A }
}

// biome-ignore lint/suspicious/noExplicitAny: events and records are printed loosely
type Json = any

async function* sse(response: Response): AsyncGenerator<Json> {
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
      const data = frame
        .split("\n")
        .filter((l) => l.startsWith("data: "))
        .map((l) => l.slice(6))
        .join("\n")
      if (data) yield JSON.parse(data)
    }
  }
}

const status = async (client: Client, url: string, io: Io) => {
  let health: Response
  try {
    health = await fetch(`${url}/readyz`)
  } catch {
    throw new CliError(`palyrad is not reachable at ${url}`, 3)
  }
  const ready = health.ok
  const sessions = await client.json<Array<Json>>("GET", "/v1/sessions?limit=1000")
  const pending = await client.json<Array<Json>>("GET", "/v1/approvals?status=pending")
  io.out(
    `palyrad at ${url}: ${ready ? "ready" : "starting"}\n  sessions: ${sessions.length}\n  pending approvals: ${pending.length}\n`
  )
  return ready ? 0 : 1
}

const answerApproval = async (client: Client, event: Json, args: Args, io: Io) => {
  io.out(`\n⚠ approval needed: ${event.summary} (risk: ${event.risk})\n`)
  let answer: string
  if (args.options.yes) answer = "y"
  else if (args.options.no) answer = "n"
  else answer = (await io.ask("  approve? [y]es / [n]o / [a]lways for these exact arguments: ")).trim().toLowerCase()
  const decision = answer === "y" || answer === "yes" || answer === "a" || answer === "always" ? "approve" : "deny"
  const scope = answer === "a" || answer === "always" ? "always" : "once"
  await client.json("POST", `/v1/approvals/${event.approvalId}`, { decision, scope, reason: "answered in palyra chat" })
  io.out(`  ${decision === "approve" ? `approved (${scope})` : "denied"}\n`)
}

const chatOnce = async (client: Client, text: string, sessionKey: string, args: Args, io: Io) => {
  const response = await client.request("POST", "/v1/runs?stream=true", { text, sessionKey, channel: "cli" })
  let final = "Done"
  let streaming = false
  for await (const event of sse(response)) {
    switch (event._tag) {
      case "AssistantDelta":
        if (!streaming) io.out("assistant: ")
        streaming = true
        io.out(event.text)
        break
      case "AssistantMessage":
        if (streaming) io.out("\n")
        streaming = false
        break
      case "PolicyDecided":
        io.out(`  [policy] ${event.tool}: ${event.decision} (${event.policyIds.join(", ") || "no policy"})\n`)
        break
      case "ApprovalRequested":
        await answerApproval(client, event, args, io)
        break
      case "ToolResult":
        io.out(
          `  [tool] ${event.tool}: ${event.status}${event.status === "ok" ? "" : ` — ${String(event.output).slice(0, 200)}`}\n`
        )
        break
      case "RunError":
        io.err(`run failed: ${event.code}: ${event.message}\n`)
        break
      case "RunStateChanged":
        if (["Done", "Cancelled", "Failed"].includes(event.to)) final = event.to
        break
    }
  }
  return final === "Done" ? 0 : 1
}

const chat = async (client: Client, message: string, args: Args, io: Io) => {
  const sessionKey = String(args.options.session ?? "cli")
  if (message.length > 0) return chatOnce(client, message, sessionKey, args, io)
  if (!io.interactive) throw new CliError("chat needs a message when stdin is not a terminal", 2)
  io.out(`palyra chat — session "${sessionKey}". Empty line or Ctrl-D to quit.\n`)
  while (true) {
    const line = (await io.ask("you: ").catch(() => "")).trim()
    if (line.length === 0) return 0
    await chatOnce(client, line, sessionKey, args, io).catch((e) => {
      if (e instanceof CliError && e.exitCode !== 1) throw e
      io.err(`${e instanceof Error ? e.message : String(e)}\n`)
    })
  }
}

const approvals = async (client: Client, sub: string | undefined, rest: Array<string>, args: Args, io: Io) => {
  if (sub === "list" || sub === undefined) {
    const status = String(args.options.status ?? "pending")
    const list = await client.json<Array<Json>>("GET", `/v1/approvals?status=${encodeURIComponent(status)}`)
    if (list.length === 0) io.out(`no ${status} approvals\n`)
    for (const a of list) {
      io.out(`${a.id}  ${a.status.padEnd(8)} ${a.risk.padEnd(9)} ${a.tool}  ${a.summary}\n`)
    }
    return 0
  }
  if (sub === "approve" || sub === "deny") {
    const id = rest[0]
    if (!id) throw new CliError(`approvals ${sub} needs an approval id`, 2)
    const record = await client.json<Json>("POST", `/v1/approvals/${id}`, {
      decision: sub,
      ...(sub === "approve" && args.options.scope ? { scope: String(args.options.scope) } : {}),
      ...(args.options.reason ? { reason: String(args.options.reason) } : {}),
      ...(args.options["expires-in"] ? { expiresInSeconds: Number(args.options["expires-in"]) } : {}),
      ...(args.options["max-uses"] ? { maxUses: Number(args.options["max-uses"]) } : {})
    })
    io.out(`${record.id}: ${record.status}${record.status === "approved" ? ` (${record.scope})` : ""}\n`)
    return 0
  }
  throw new CliError(`unknown approvals command "${sub}" (list, approve, deny)`, 2)
}

const grants = async (client: Client, sub: string | undefined, rest: Array<string>, io: Io) => {
  if (sub === "list" || sub === undefined) {
    const list = await client.json<Array<Json>>("GET", "/v1/grants")
    if (list.length === 0) io.out("no standing grants\n")
    for (const g of list) {
      const limits = [
        g.grantMaxUses === null ? `${g.grantUses} uses` : `${g.grantUses}/${g.grantMaxUses} uses`,
        g.grantExpiresAt === null ? "no expiry" : `expires ${new Date(g.grantExpiresAt).toISOString()}`
      ].join(", ")
      io.out(
        `${g.id}  ${g.status.padEnd(8)} ${g.scope.padEnd(8)} ${g.principal} ${g.tool} (${limits})\n${g.policy ?? ""}\n\n`
      )
    }
    return 0
  }
  if (sub === "revoke") {
    const id = rest[0]
    if (!id) throw new CliError("grants revoke needs a grant id (see `palyra grants list`)", 2)
    const g = await client.json<Json>("POST", `/v1/grants/${id}/revoke`)
    io.out(`${g.id}: ${g.status}\n`)
    return 0
  }
  throw new CliError(`unknown grants command "${sub}" (list, revoke)`, 2)
}

const sessions = async (client: Client, sub: string | undefined, rest: Array<string>, io: Io) => {
  if (sub === "list" || sub === undefined) {
    const list = await client.json<Array<Json>>("GET", "/v1/sessions")
    if (list.length === 0) io.out("no sessions\n")
    for (const s of list) {
      io.out(
        `${s.id}  ${String(s.key ?? "-").padEnd(12)} ${s.principal.padEnd(10)} tokens ${s.tokensUsed}  updated ${new Date(s.updatedAt).toISOString()}\n`
      )
    }
    return 0
  }
  const id = rest[0]
  if (!id) throw new CliError(`sessions ${sub} needs a session id`, 2)
  if (sub === "show") {
    const s = await client.json<Json>("GET", `/v1/sessions/${id}`)
    const tape = await client.json<Array<Json>>("GET", `/v1/sessions/${id}/tape?limit=5000`)
    io.out(`${JSON.stringify(s, null, 2)}\n${tape.length} tape events\n`)
    return 0
  }
  if (sub === "reset") {
    const s = await client.json<Json>("POST", `/v1/sessions/${id}/reset`)
    io.out(`session ${s.id} reset (generation ${s.resetGeneration})\n`)
    return 0
  }
  throw new CliError(`unknown sessions command "${sub}" (list, show, reset)`, 2)
}

const printEvent = (e: Json) => {
  const { _tag, tapeSeq, at, sessionId: _s, runId, ...rest } = e
  return `${String(tapeSeq).padStart(5)}  ${new Date(at).toISOString()}  ${String(_tag).padEnd(18)} ${runId ? `${runId.slice(-6)} ` : ""}${JSON.stringify(rest).slice(0, 160)}\n`
}

const journal = async (client: Client, sub: string | undefined, rest: Array<string>, args: Args, io: Io) => {
  if (sub === "verify") {
    const result = await client.json<Json>("GET", "/v1/journal/verify")
    if (result.ok) {
      io.out(`journal verified: ${result.checked} events, hash chain intact\n`)
      return 0
    }
    io.out(`journal BROKEN after ${result.checked} good events: ${result.reason} — ${result.detail}\n`)
    return 1
  }
  if (sub === "tail") {
    const id = rest[0]
    if (!id) throw new CliError("journal tail needs a session id (see `palyra sessions list`)", 2)
    if (args.options.follow) {
      const response = await client.request("GET", `/v1/sessions/${id}/events`)
      for await (const e of sse(response)) io.out(printEvent(e))
      return 0
    }
    const tape = await client.json<Array<Json>>("GET", `/v1/sessions/${id}/tape?limit=5000`)
    for (const e of tape) io.out(printEvent(e))
    return 0
  }
  throw new CliError(`unknown journal command "${sub}" (tail, verify)`, 2)
}

/** Terminal I/O for the real binary. @since 0.1.0 @category Io */
export const processIo = (): Io & { readonly close: () => void } => {
  let rl: Interface | undefined
  const lines: Array<string> = []
  const waiting: Array<(line: string) => void> = []
  let closed = false
  const ensure = () => {
    if (rl) return
    rl = createInterface({ input: process.stdin, terminal: Boolean(process.stdin.isTTY) })
    rl.on("line", (line) => {
      const w = waiting.shift()
      if (w) w(line)
      else lines.push(line)
    })
    rl.on("close", () => {
      closed = true
      for (const w of waiting.splice(0)) w("")
    })
  }
  return {
    out: (t) => void process.stdout.write(t),
    err: (t) => void process.stderr.write(t),
    interactive: Boolean(process.stdin.isTTY),
    ask: (question) => {
      ensure()
      process.stdout.write(question)
      const next = lines.shift()
      if (next !== undefined) return Promise.resolve(next)
      if (closed) return Promise.resolve("")
      return new Promise((r) => waiting.push(r))
    },
    close: () => rl?.close()
  }
}
