/**
 * `Fetch.make`: the providers' `fetch` over undici's `request`, against a real server on 127.0.0.1
 * and the real `@ai-sdk/openai-compatible` client (the streaming, errors, tool calls and
 * cancellation through it are covered by `AiSdkModel.test.ts`, which runs with both fetches).
 */
import { createServer, type IncomingHttpHeaders, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { gzipSync } from "node:zlib"
import { createOpenAICompatible } from "@ai-sdk/openai-compatible"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Chunk, Effect, Stream } from "effect"
import * as Fetch from "../src/adapters/ai-sdk/Fetch.js"
import { AiSdkModel } from "../src/ai-sdk.js"
import { closeServer, listenLocal } from "./helpers.js"

const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
  `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
const answer = `${chunk({ role: "assistant", content: "" })}${chunk({ content: "zipped " })}${chunk({ content: "answer" })}${chunk({}, "stop")}data: [DONE]\n\n`

const seen: Array<{ url: string; headers: IncomingHttpHeaders; raw: Array<string>; body: string }> = []
let server: Server
let base = ""

beforeAll(async () => {
  server = createServer((req, res) => {
    let body = ""
    req.on("data", (d) => (body += d))
    req.on("end", () => {
      seen.push({ url: req.url ?? "", headers: req.headers, raw: req.rawHeaders, body })
      if (req.url === "/moved/chat/completions") {
        res.writeHead(307, { location: "/gz/chat/completions" }).end()
      } else if (req.url === "/gz/chat/completions") {
        // Compressed although the client asked for identity: still decoded.
        res.writeHead(200, { "content-type": "text/event-stream", "content-encoding": "gzip" })
        res.end(gzipSync(answer))
      } else if (req.url === "/empty") {
        res.writeHead(204).end()
      } else {
        res.writeHead(200, { "content-type": "text/event-stream" })
        res.end(answer)
      }
    })
  })
  base = await listenLocal(server)
})
afterAll(() => closeServer(server))

const texts = (baseURL: string, fetch: typeof globalThis.fetch) =>
  Stream.runCollect(
    AiSdkModel.make(createOpenAICompatible({ name: "local", baseURL, apiKey: "k-123", fetch }).chatModel("m")).stream({
      messages: [{ role: "user", text: "hi" }],
      tools: []
    })
  ).pipe(
    Effect.map((events) =>
      Chunk.toReadonlyArray(events)
        .flatMap((e) => (e.type === "text-delta" ? [e.text] : []))
        .join("")
    )
  )

describe("Fetch.make", () => {
  it.live("sends the provider's request as it is (method, headers, body) and asks for an uncompressed answer", () =>
    Effect.gen(function* () {
      const fetch = Fetch.make({})!
      seen.length = 0
      assert.strictEqual(yield* texts(`${base}/v1`, fetch), "zipped answer")
      const request = seen[0]!
      assert.strictEqual(request.url, "/v1/chat/completions")
      assert.strictEqual(request.headers.authorization, "Bearer k-123")
      assert.strictEqual(request.headers["content-type"], "application/json")
      assert.strictEqual(request.headers["accept-encoding"], "identity")
      assert.strictEqual((JSON.parse(request.body) as { stream: boolean }).stream, true)
    })
  )

  it.live("follows a redirect and decodes a compressed answer", () =>
    Effect.gen(function* () {
      seen.length = 0
      assert.strictEqual(yield* texts(`${base}/moved`, Fetch.make({})!), "zipped answer")
      assert.deepStrictEqual(
        seen.map((s) => s.url),
        ["/moved/chat/completions", "/gz/chat/completions"]
      )
    })
  )

  it.live("sends a header record as a `Headers` would: names, values and their order on the wire", () =>
    Effect.promise(async () => {
      const fetch = Fetch.make({})!
      const records: Array<Record<string, string | undefined>> = [
        // The provider's usual record (already canonical: copied without a `Headers`).
        { authorization: "Bearer k-123", "content-type": "application/json", "user-agent": "ai-sdk/x 1.0" },
        // Unsorted names, an absent one, inner spaces.
        { "x-b": "two words", "content-type": "application/json", "x-a": "1", "x-skip": undefined },
        // What `Headers` changes (upper-case names, a value to trim, names equal but for case).
        { "X-Upper": "  padded\t", "x-upper": "second", Authorization: "Bearer k" }
      ]
      for (const headers of records) {
        seen.length = 0
        const response = await fetch(`${base}/v1/chat/completions`, { method: "POST", headers, body: "{}" })
        await response.text()
        const defined = Object.entries(headers).filter((e): e is [string, string] => e[1] !== undefined)
        const expected = [...new Headers(defined)].flat()
        const names = new Set(expected.filter((_, i) => i % 2 === 0))
        const raw = seen[0]!.raw
        const sent = raw.flatMap((v, i) => (i % 2 === 0 && names.has(v) ? [v, raw[i + 1]!] : []))
        assert.deepStrictEqual(sent, expected)
        assert.strictEqual(seen[0]!.body, "{}")
      }
    })
  )

  it.live("a status without a body is an empty response", () =>
    Effect.promise(async () => {
      const response = await Fetch.make({})!(`${base}/empty`, { method: "GET" })
      assert.strictEqual(response.status, 204)
      assert.strictEqual(response.body, null)
    })
  )

  it("refuses a header value with CR, LF or NUL as `Headers` does (nothing sent)", async () => {
    const fetch = Fetch.make({})!
    for (const value of ["a\r\nx-injected: 1", "a\nb", "a\rb", "a\u0000b"]) {
      seen.length = 0
      const sent = fetch(`${base}/v1/chat/completions`, { method: "POST", headers: { "x-a": value }, body: "{}" })
      await sent.then(
        () => assert.fail(`sent ${JSON.stringify(value)}`),
        (error: unknown) => assert.instanceOf(error, TypeError)
      )
      assert.strictEqual(seen.length, 0)
    }
  })

  it("leaves a process with a proxy configured to the global fetch", () => {
    assert.isUndefined(Fetch.make({ HTTPS_PROXY: "http://proxy:3128" }))
    assert.isUndefined(Fetch.make({ http_proxy: "http://proxy:3128" }))
    assert.isFunction(Fetch.make({ HTTP_PROXY: "" }))
  })

  it("a compressed answer whose connection drops mid-body fails the read (it does not hang)", async () => {
    const gz = gzipSync(Buffer.from(`data: ${"x".repeat(100_000)}\n\n`))
    const dropping = createServer((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream", "content-encoding": "gzip" })
      res.write(gz.subarray(0, gz.length >> 1))
      setTimeout(() => res.socket?.destroy(), 50)
    })
    await new Promise<void>((resolve) => dropping.listen(0, "127.0.0.1", resolve))
    try {
      const fast = Fetch.make({})
      assert.isDefined(fast)
      const url = `http://127.0.0.1:${(dropping.address() as AddressInfo).port}/`
      const answer = await fast!(url, { method: "POST", body: "{}" })
      const reader = answer.body!.getReader()
      const outcome = await new Promise<string>((resolve) => {
        const timer = setTimeout(() => resolve("still pending"), 10_000)
        const pump = (): Promise<void> =>
          reader.read().then(
            (next) => (next.done ? resolve("ended") : pump()),
            () => resolve("failed")
          )
        void pump().finally(() => clearTimeout(timer))
      })
      assert.strictEqual(outcome, "failed")
    } finally {
      dropping.closeAllConnections()
      dropping.close()
    }
  })
})
