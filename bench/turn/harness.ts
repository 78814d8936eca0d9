/**
 * bench/turn's shared parts: the local OpenAI chat-completions server that answers at once (a text
 * answer, or one `time.*` tool call when the user asks "what time…"), palyrad started as a child
 * process against it, and one streamed turn over HTTP (`POST /v1/runs?stream=true` until the run's
 * final `RunStateChanged`, SSE frames parsed as they arrive).
 */
import { type ChildProcess, spawn } from "node:child_process"
import { readFileSync, writeFileSync } from "node:fs"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { join } from "node:path"
import { daemonEnv, gcFlags, shebangFlags } from "../lib/report.js"

/** One chat-completions stream chunk, as an SSE frame. */
export const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
  `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "bench", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`

/** The usage chunk that ends a stream, as an SSE frame. */
export const usage = (completionTokens = 5) =>
  `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "bench", choices: [], usage: { prompt_tokens: 20, completion_tokens: completionTokens, total_tokens: 20 + completionTokens } })}\n\n`

/**
 * The bench model: a text answer in three deltas, or — when the last message is the user's and asks
 * "what time", and a `time.*` tool is offered — one call of that tool. `onCall` hears each request's
 * arrival, answer and size.
 */
export const benchModel = (
  onCall?: (call: { arrived: number; answered: number; bytes: number }) => void,
  /** Milliseconds before the answer's head (a model's time to first token); 0: at once. */
  delayMs = 0
): Server =>
  createServer((req, res) => {
    let body = ""
    const arrived = performance.now()
    req.on("data", (d) => (body += d))
    req.on("end", () => (delayMs > 0 ? setTimeout(answer, delayMs) : answer()))
    const answer = () => {
      if (onCall) res.on("finish", () => onCall({ arrived, answered: performance.now(), bytes: body.length }))
      const request = JSON.parse(body || "{}") as {
        messages?: Array<{ role: string; content?: unknown }>
        tools?: Array<{ function?: { name?: string } }>
      }
      const last = request.messages?.at(-1)
      const wantsTool = last?.role === "user" && JSON.stringify(last.content).includes("what time")
      const timeTool = request.tools?.map((t) => t.function?.name).find((n) => n?.startsWith("time"))
      res.writeHead(200, { "content-type": "text/event-stream" })
      if (wantsTool && timeTool) {
        res.write(chunk({ role: "assistant", content: null }))
        res.write(
          chunk({
            tool_calls: [{ index: 0, id: "call-1", type: "function", function: { name: timeTool, arguments: "{}" } }]
          })
        )
        res.write(chunk({}, "tool_calls"))
      } else {
        res.write(chunk({ role: "assistant", content: "" }))
        res.write(chunk({ content: "Hello from " }))
        res.write(chunk({ content: "the bench model." }))
        res.write(chunk({}, "stop"))
      }
      res.end(`${usage()}data: [DONE]\n\n`)
    }
  })

/** Listen on 127.0.0.1 (a free port); the server's base URL for an OpenAI client (`…/v1`). */
export const listenModel = async (server: Server): Promise<string> => {
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`
}

/** The URL a server prints on stderr once it listens (palyrad and the floors alike). */
export const listening = (child: ChildProcess, name: string) =>
  new Promise<string>((resolve, reject) => {
    let err = ""
    child.stderr!.on("data", (d) => {
      err += d
      const m = /listening on (http:\/\/\S+)/.exec(err)
      if (m) resolve(m[1]!)
    })
    child.on("exit", (code) => reject(new Error(`${name} exited ${code}: ${err}`)))
  })

/**
 * palyrad (`bin`) in `dir`, its model `openai-compatible:<modelUrl>#bench` (plus `toml`), node flags
 * `nodeFlags` (profilers, preloads) and the bench's GC flags; once it listens: its URL and admin token.
 */
export const startPalyrad = async (options: {
  readonly bin: string
  readonly dir: string
  readonly modelUrl: string
  readonly toml?: string | undefined
  readonly nodeFlags?: ReadonlyArray<string> | undefined
}) => {
  const { bin, dir } = options
  writeFileSync(
    join(dir, "palyra.toml"),
    `model = "openai-compatible:${options.modelUrl}#bench"\n${options.toml ?? ""}\n`
  )
  const daemon = spawn(
    process.execPath,
    [...shebangFlags(bin), ...(options.nodeFlags ?? []), ...gcFlags, bin, "--port", "0", "--log-format", "json"],
    {
      cwd: dir,
      stdio: ["ignore", "ignore", "pipe"],
      env: { ...process.env, ...daemonEnv(), PALYRA_LOG_LEVEL: "warning", PALYRA_GRPC_PORT: "0" }
    }
  )
  const url = await listening(daemon, "palyrad")
  const token = readFileSync(join(dir, ".palyra", "admin.token"), "utf8").trim()
  return { daemon, url, token }
}

/** A process's CPU time so far (user + system, all threads), from /proc, in ms. */
export const cpuMsOf = (pid: number) => {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ")
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100
}

/** A tape event as the SSE stream carries it (the fields the benches look at). */
export interface StreamedEvent {
  readonly _tag: string
  readonly to?: string
  readonly status?: string
}

/**
 * One turn, timed from the request to the SSE frame with the run's final `RunStateChanged` (ms);
 * `onEvent` sees every event before it. Fails unless the run ended `Done`.
 */
export const streamTurn = async (
  url: string,
  token: string,
  text: string,
  sessionKey: string,
  onEvent?: (event: StreamedEvent) => void
): Promise<number> => {
  const t0 = performance.now()
  const response = await fetch(`${url}/v1/runs?stream=true`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ text, sessionKey }),
    signal: AbortSignal.timeout(15_000)
  })
  if (!response.ok) throw new Error(`HTTP ${response.status}: ${await response.text()}`)
  const reader = response.body!.getReader()
  const decoder = new TextDecoder()
  let buffer = ""
  while (true) {
    const { done, value } = await reader.read()
    if (done) throw new Error("stream ended before the run did")
    buffer += decoder.decode(value, { stream: true })
    let cut = buffer.indexOf("\n\n")
    while (cut >= 0) {
      const frame = buffer.slice(0, cut)
      buffer = buffer.slice(cut + 2)
      cut = buffer.indexOf("\n\n")
      const data = /^data: (.*)$/m.exec(frame)?.[1]
      if (data === undefined) continue
      const event = JSON.parse(data) as StreamedEvent
      onEvent?.(event)
      if (event._tag !== "RunStateChanged" || !["Done", "Failed", "Cancelled"].includes(event.to ?? "")) continue
      const ms = performance.now() - t0
      await reader.cancel()
      if (event.to !== "Done") throw new Error(`run ended ${event.to}`)
      return ms
    }
  }
}
