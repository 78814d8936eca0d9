/**
 * bench/turn's floors: the same turn without Palyra, served by a bare `node:http` server in its own
 * process, driven by the same client against the same model server. No journal, no policy, no
 * sessions, no Effect — what is left is the part of a turn Palyra cannot remove:
 *
 * - `provider`: the AI SDK's OpenAI-compatible provider (`doStream`, what palyrad's adapter calls,
 *   with palyrad's own `fetch` over undici's `request`), the tool loop by hand: the floor of the
 *   stack palyrad is built on.
 * - `raw`: one `http.request` per model call on a keep-alive agent, its SSE split by hand: the floor
 *   of the machine (an HTTP request in, one or two HTTP requests out, SSE frames back).
 *
 * Each answers `POST /v1/runs?stream=true` with SSE frames shaped like palyrad's (`AssistantDelta`,
 * then a final `RunStateChanged` to `Done`), so the client times both the same way. Prints
 * "listening on <url>" on stderr like palyrad.
 *
 * Usage: `floor.ts <model base URL> provider|raw`
 */

import { Agent, createServer, request, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { createOpenAICompatible } from "@ai-sdk/openai-compatible"
import { make as makeFetch } from "../../packages/core/src/adapters/ai-sdk/Fetch.js"

const [modelUrl, mode] = process.argv.slice(2) as [string, "provider" | "raw"]
// The most model calls of one turn (the bench's tool turn takes two).
const maxSteps = 4
const frame = (event: Record<string, unknown>) => `data: ${JSON.stringify(event)}\n\n`
const toolName = "time_now"
const now = () => new Date().toISOString()

// ---- provider: the AI SDK's model, as palyrad drives it ------------------------------------------
const fetch = makeFetch()
const model = createOpenAICompatible({ name: "bench", baseURL: modelUrl, ...(fetch ? { fetch } : {}) }).chatModel(
  "bench"
)
const tools = [
  {
    type: "function" as const,
    name: toolName,
    description: "The current time.",
    inputSchema: { type: "object" as const }
  }
]
type Prompt = Parameters<typeof model.doStream>[0]["prompt"]
const viaProvider = async (text: string, res: ServerResponse) => {
  const prompt: Prompt = [{ role: "user", content: [{ type: "text", text }] }]
  for (let step = 0; step < maxSteps; step++) {
    const { stream } = await model.doStream({ prompt, tools })
    const calls: Array<{ toolCallId: string; toolName: string; input: string }> = []
    const reader = stream.getReader()
    for (let part = await reader.read(); !part.done; part = await reader.read()) {
      const value = part.value
      if (value.type === "text-delta") res.write(frame({ _tag: "AssistantDelta", text: value.delta }))
      else if (value.type === "tool-call") calls.push(value)
      else if (value.type === "error") throw value.error
    }
    if (calls.length === 0) return
    prompt.push({
      role: "assistant",
      content: calls.map((c) => ({
        type: "tool-call" as const,
        toolCallId: c.toolCallId,
        toolName: c.toolName,
        input: JSON.parse(c.input) as unknown
      }))
    })
    prompt.push({
      role: "tool",
      content: calls.map((c) => ({
        type: "tool-result" as const,
        toolCallId: c.toolCallId,
        toolName: c.toolName,
        output: { type: "text" as const, value: now() }
      }))
    })
  }
}

// ---- raw: one http.request per model call --------------------------------------------------------
const agent = new Agent({ keepAlive: true })
const endpoint = new URL(`${modelUrl}/chat/completions`)
type Chunk = {
  choices: Array<{ delta: { content?: string | null; tool_calls?: Array<{ id: string; function: unknown }> } }>
}
const call = (messages: Array<unknown>) =>
  new Promise<Array<Chunk>>((resolve, reject) => {
    const req = request(endpoint, { method: "POST", agent, headers: { "content-type": "application/json" } }, (res) => {
      let buffer = ""
      const chunks: Array<Chunk> = []
      res.setEncoding("utf8")
      res.on("data", (d: string) => {
        buffer += d
        for (let cut = buffer.indexOf("\n\n"); cut >= 0; cut = buffer.indexOf("\n\n")) {
          const data = buffer.slice(6, cut)
          buffer = buffer.slice(cut + 2)
          if (data !== "[DONE]") chunks.push(JSON.parse(data) as Chunk)
        }
      })
      res.on("end", () => resolve(chunks))
      res.on("error", reject)
    })
    req.on("error", reject)
    req.end(
      JSON.stringify({
        model: "bench",
        stream: true,
        messages,
        tools: [{ type: "function", function: { name: toolName, parameters: { type: "object" } } }]
      })
    )
  })
const viaRaw = async (text: string, res: ServerResponse) => {
  const messages: Array<unknown> = [{ role: "user", content: text }]
  for (let step = 0; step < maxSteps; step++) {
    const calls: Array<{ id: string; function: unknown }> = []
    for (const chunk of await call(messages))
      for (const choice of chunk.choices) {
        if (choice.delta.content) res.write(frame({ _tag: "AssistantDelta", text: choice.delta.content }))
        if (choice.delta.tool_calls) calls.push(...choice.delta.tool_calls)
      }
    if (calls.length === 0) return
    messages.push({ role: "assistant", tool_calls: calls })
    for (const c of calls) messages.push({ role: "tool", tool_call_id: c.id, content: now() })
  }
}

const turn = mode === "raw" ? viaRaw : viaProvider
const server = createServer((req, res) => {
  let body = ""
  req.setEncoding("utf8")
  req.on("data", (d: string) => (body += d))
  req.on("end", () => {
    res.writeHead(200, { "content-type": "text/event-stream" })
    turn((JSON.parse(body) as { text: string }).text, res).then(
      () => res.end(frame({ _tag: "RunStateChanged", to: "Done" })),
      (error: unknown) => res.end(frame({ _tag: "RunStateChanged", to: "Failed", error: String(error) }))
    )
  })
})
server.listen(0, "127.0.0.1", () =>
  process.stderr.write(`listening on http://127.0.0.1:${(server.address() as AddressInfo).port}\n`)
)
