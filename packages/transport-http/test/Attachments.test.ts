/**
 * Attachments over HTTP, end to end: a real server on 127.0.0.1, the real AI SDK provider
 * (`openai-compatible:` through `@palyra/core/models`) and a local server speaking the
 * chat-completions wire protocol that records what it is sent.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { BlobStore, type Gateway, Journal, type ModelProvider, ScriptedModel } from "@palyra/core"
import { CedarPolicy } from "@palyra/core/cedar"
import { Models } from "@palyra/core/models"
import { gatewayLayer } from "@palyra/core/testing"
import { Effect, Exit, type Layer, ManagedRuntime, Schedule, Scope } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { HttpTransport } from "../src/index.js"
import { ALICE, TOKENS } from "./fixtures.js"

// A 1×1 PNG.
const png = Buffer.from(
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==",
  "base64"
)

/** A chat-completions server that answers "I see it." and keeps every request body. */
const completions = () => {
  const requests: Array<{ messages: Array<{ role: string; content: unknown }> }> = []
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = ""
    req.on("data", (d) => (body += d))
    req.on("end", () => {
      requests.push(JSON.parse(body))
      res.writeHead(200, { "content-type": "text/event-stream" })
      const chunk = (delta: object, finish: string | null) =>
        `data: ${JSON.stringify({ id: "c1", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
      res.write(chunk({ role: "assistant", content: "I see it." }, null))
      res.write(chunk({}, "stop"))
      res.end("data: [DONE]\n\n")
    })
  })
  return { server, requests }
}

const serve = async (model: ModelProvider.Service) => {
  const blobs = BlobStore.memory()
  const runtime = ManagedRuntime.make(
    gatewayLayer({ model, blobs, policy: CedarPolicy.layer() }) as Layer.Layer<Gateway.Gateway | Journal.Journal>
  )
  const scope = await runtime.runPromise(Scope.make())
  const { url } = await runtime.runPromise(
    HttpTransport.serve({ port: 0, tokens: TOKENS, maxBodyBytes: 256 * 1024 }).pipe(Scope.extend(scope))
  )
  const waitDone = (runId: string) =>
    runtime.runPromise(
      Effect.flatMap(Journal.Journal, (j) => j.getRun(runId as never)).pipe(
        Effect.repeat({
          schedule: Schedule.spaced("20 millis"),
          until: (r) => r._tag === "Some" && ["Done", "Failed", "Cancelled"].includes(r.value.state)
        }),
        Effect.timeout("10 seconds")
      )
    )
  return {
    url,
    blobs,
    waitDone,
    close: async () => {
      await runtime.runPromise(Scope.close(scope, Exit.void))
      await runtime.dispose()
    }
  }
}

let upstream: ReturnType<typeof completions>
let upstreamUrl = ""
beforeAll(async () => {
  upstream = completions()
  await new Promise<void>((r) => upstream.server.listen(0, "127.0.0.1", () => r()))
  upstreamUrl = `http://127.0.0.1:${(upstream.server.address() as AddressInfo).port}/v1`
})
afterAll(async () => {
  upstream.server.closeAllConnections()
  await new Promise<void>((r) => upstream.server.close(() => r()))
})

const imageUrlOf = (request: { messages: Array<{ role: string; content: unknown }> }) => {
  const user = request.messages.findLast((m) => m.role === "user")
  const parts = Array.isArray(user?.content) ? (user.content as Array<Record<string, unknown>>) : []
  return { parts, image: parts.find((p) => p.type === "image_url") as { image_url: { url: string } } | undefined }
}

describe("attachments over HTTP", () => {
  it("JSON base64 and multipart: the image reaches the model's server as an image_url part with the same bytes", async () => {
    // llava: a vision model by the model table.
    const model = await Effect.runPromise(Models.fromSpec(`openai-compatible:${upstreamUrl}#llava:7b`, {}))
    const server = await serve(model)
    try {
      const sent = await fetch(`${server.url}/v1/runs`, {
        method: "POST",
        headers: { ...ALICE, "content-type": "application/json" },
        body: JSON.stringify({
          text: "what is in this picture?",
          sessionKey: "vision",
          attachments: [{ name: "dot.png", mediaType: "application/octet-stream", data: png.toString("base64") }]
        })
      })
      expect(sent.status).toBe(202)
      const { runId } = (await sent.json()) as { runId: string }
      await server.waitDone(runId)
      const { parts, image } = imageUrlOf(upstream.requests.at(-1)!)
      expect(parts[0]).toEqual({ type: "text", text: "what is in this picture?" })
      expect(image?.image_url.url).toBe(`data:image/png;base64,${png.toString("base64")}`)

      // The same over multipart/form-data (fetch's own FormData encoder).
      const form = new FormData()
      form.set("text", "and this one?")
      form.set("sessionKey", "vision")
      form.set("file", new Blob([png], { type: "image/x-unknown" }), "again.png")
      form.set("notes", new Blob(["line one\nline two\n"], { type: "text/markdown" }), "notes.md")
      const multi = await fetch(`${server.url}/v1/runs`, { method: "POST", headers: ALICE, body: form })
      expect(multi.status).toBe(202)
      await server.waitDone(((await multi.json()) as { runId: string }).runId)
      const second = imageUrlOf(upstream.requests.at(-1)!)
      expect(second.image?.image_url.url).toBe(`data:image/png;base64,${png.toString("base64")}`)
      expect(second.parts[0]?.text).toMatch(
        /^and this one\?\n\n<attachment name="notes.md" media-type="text\/markdown"/
      )
      // The earlier turn's image is still part of the conversation.
      expect(upstream.requests.at(-1)!.messages.filter((m) => Array.isArray(m.content)).length).toBe(2)

      // The tape names the image by digest; the bytes are stored once.
      const run = (await (await fetch(`${server.url}/v1/runs/${runId}`, { headers: ALICE })).json()) as {
        sessionId: string
      }
      const tape = (await (
        await fetch(`${server.url}/v1/sessions/${run.sessionId}/tape`, { headers: ALICE })
      ).json()) as Array<Record<string, unknown>>
      const users = tape.filter((e) => e._tag === "UserMessage")
      expect(users.map((u) => (u.attachments as Array<{ name: string }>).map((a) => a.name))).toEqual([
        ["dot.png"],
        ["again.png", "notes.md"]
      ])
      const digests = users.flatMap((u) => (u.attachments as Array<{ digest: string }>).map((a) => a.digest))
      expect(digests[0]).toBe(digests[1])
      expect(JSON.stringify(tape)).not.toContain(png.toString("base64"))

      // Broken inputs are typed 4xx, nothing admitted.
      const bad = await fetch(`${server.url}/v1/runs`, {
        method: "POST",
        headers: { ...ALICE, "content-type": "application/json" },
        body: JSON.stringify({ text: "x", attachments: [{ data: "!!not base64!!" }] })
      })
      expect(bad.status).toBe(400)
      const big = await fetch(`${server.url}/v1/runs`, {
        method: "POST",
        headers: { ...ALICE, "content-type": "application/json" },
        body: JSON.stringify({ text: "x", attachments: [{ data: Buffer.alloc(300 * 1024).toString("base64") }] })
      })
      expect(big.status).toBe(413)
    } finally {
      await server.close()
    }
  })

  it("a model that does not accept images: 400 invalid_argument naming the model, and no run", async () => {
    const model = ScriptedModel.make(() => ({ text: "never" }))
    const server = await serve(model)
    try {
      const response = await fetch(`${server.url}/v1/runs`, {
        method: "POST",
        headers: { ...ALICE, "content-type": "application/json" },
        body: JSON.stringify({ text: "look", attachments: [{ data: png.toString("base64") }] })
      })
      expect(response.status).toBe(400)
      const body = (await response.json()) as { code: string; message: string }
      expect(body.code).toBe("invalid_argument")
      expect(body.message).toBe("model scripted does not accept images")
      expect(model.prompts.length).toBe(0)
    } finally {
      await server.close()
    }
  })
})
