/**
 * The HttpApi routes that write a streamed start on Node's response themselves (`startStream.ts`)
 * still answer the platform as the response was: the server span reports the status written (200,
 * or the client abort's 499), an app an embedder serves (`HttpTransport.httpApp` under its own
 * middleware) keeps the platform's path so its headers apply, a slow reader leaves no listeners
 * behind, and a start that fails after its commit ends its body at once. Real servers on 127.0.0.1,
 * `fetch` and `node:http` clients, a recording tracer.
 */
import { createServer, request, type ServerResponse } from "node:http"
import * as HttpMiddleware from "@effect/platform/HttpMiddleware"
import { NodeHttpServer } from "@effect/platform-node"
import { Errors, type Gateway, ScriptedModel } from "@palyra/core"
import { gatewayLayer, holdStartRunFollowing, recordingTracer } from "@palyra/core/testing"
import { Effect, Exit, Layer, ManagedRuntime, Scope, Stream } from "effect"
import { describe, expect, it } from "vitest"
import { HttpTransport } from "../src/index.js"
import { writeFrames } from "../src/internal/startStream.js"

const options = { port: 0, tokens: [{ token: "alice-token", principal: "alice" }], heartbeatSeconds: 30 }
const ALICE = { authorization: "Bearer alice-token" }
const form = () => {
  const f = new FormData()
  f.set("text", "hi") // multipart: the app's route, not the fast one
  return f
}
const chat = { model: "m", messages: [{ role: "user", content: "hi" }], stream: true }
const chatInit = (extra: Record<string, string> = {}) => ({
  method: "POST",
  headers: { ...ALICE, "content-type": "application/json", ...extra },
  body: JSON.stringify(chat)
})

const withServer = async <A>(
  runtime: ManagedRuntime.ManagedRuntime<Gateway.Gateway, never>,
  serve: (scope: Scope.CloseableScope) => Promise<string>,
  use: (url: string) => Promise<A>
) => {
  const scope = await runtime.runPromise(Scope.make())
  try {
    return await use(await serve(scope))
  } finally {
    await runtime.runPromise(Scope.close(scope, Exit.void))
  }
}

describe("streamed starts and the platform", () => {
  it("the server spans report 200 for streamed runs and chat, 499 for a client gone mid-stream", async () => {
    const model = ScriptedModel.make(() => ({ text: ["a", "b", "c"], delayPerDelta: "100 millis" }))
    const runtime = ManagedRuntime.make(gatewayLayer({ model }) as Layer.Layer<Gateway.Gateway>)
    const { tracer, spans } = recordingTracer()
    const statusOf = (path: string) =>
      spans
        .filter((s) => s.kind === "server" && s.attributes.get("url.path") === path)
        .map((s) => s.attributes.get("http.response.status_code"))
    await withServer(
      runtime,
      async (scope) =>
        (await runtime.runPromise(HttpTransport.serve(options).pipe(Effect.withTracer(tracer), Scope.extend(scope))))
          .url,
      async (url) => {
        const runs = await fetch(`${url}/v1/runs?stream=true`, { method: "POST", headers: ALICE, body: form() })
        expect(runs.status).toBe(200)
        expect(await runs.text()).toContain("event: RunStateChanged")
        const answer = await fetch(`${url}/v1/chat/completions`, chatInit())
        expect(await answer.text()).toContain("data: [DONE]")
        const abort = new AbortController()
        const slow = await fetch(`${url}/v1/chat/completions`, {
          ...chatInit(),
          signal: abort.signal
        })
        await slow.body!.getReader().read()
        abort.abort()
        for (let i = 0; i < 100 && statusOf("/v1/chat/completions").length < 2; i++)
          await new Promise((r) => setTimeout(r, 20))
      }
    )
    await runtime.dispose()
    expect(statusOf("/v1/runs")).toEqual([200])
    expect(statusOf("/v1/chat/completions").sort()).toEqual([200, 499])
  })

  it("an embedded app's middleware shapes its streamed responses (CORS headers kept)", async () => {
    const runtime = ManagedRuntime.make(
      gatewayLayer({ model: ScriptedModel.make(() => ({ text: "ok" })) }) as Layer.Layer<Gateway.Gateway>
    )
    await withServer(
      runtime,
      (scope) =>
        runtime.runPromise(
          Effect.gen(function* () {
            const app = yield* HttpTransport.httpApp(options)
            const server = yield* NodeHttpServer.make(() => createServer(), { host: "127.0.0.1", port: 0 })
            yield* server.serve(HttpMiddleware.cors()(app))
            const address = server.address
            return `http://127.0.0.1:${address._tag === "TcpAddress" ? address.port : 0}`
          }).pipe(Scope.extend(scope))
        ),
      async (url) => {
        const origin = { origin: "http://x.example" }
        const runs = await fetch(`${url}/v1/runs?stream=true`, {
          method: "POST",
          headers: { ...ALICE, ...origin },
          body: form()
        })
        await runs.text()
        expect(runs.headers.get("access-control-allow-origin")).toBe("*")
        const answer = await fetch(`${url}/v1/chat/completions`, chatInit(origin))
        await answer.text()
        expect(answer.headers.get("access-control-allow-origin")).toBe("*")
      }
    )
    await runtime.dispose()
  })

  it("a start that fails after its commit ends its body at once, not at the next keep-alive", async () => {
    // The real kernel's start, its follower closed 50 ms after it returned, then failed.
    const failing = holdStartRunFollowing()
    failing.afterStart = (s) =>
      Effect.sleep("50 millis").pipe(
        Effect.zipRight(Effect.sync(() => s.follower.close())),
        Effect.zipRight(Effect.fail(new Errors.Conflict({ message: "after the commit" })))
      )
    const model = ScriptedModel.make(() => ({ text: ["Hello ", "there."], delayPerDelta: "200 millis" }))
    const runtime = ManagedRuntime.make(
      Layer.provideMerge(failing.layer, gatewayLayer({ model }) as Layer.Layer<Gateway.Gateway>)
    )
    const ended = await withServer(
      runtime,
      async (scope) => (await runtime.runPromise(HttpTransport.serve(options).pipe(Scope.extend(scope)))).url,
      async (url) => {
        const abort = new AbortController()
        const timer = setTimeout(() => abort.abort(), 5_000) // the keep-alive is 30 s away
        const runs = await fetch(`${url}/v1/runs?stream=true`, {
          method: "POST",
          headers: ALICE,
          body: form(),
          signal: abort.signal
        })
        const text = await runs.text().catch(() => "still open")
        clearTimeout(timer)
        return text
      }
    )
    await runtime.dispose()
    expect(ended).toContain("event: RunAccepted")
    expect(ended).not.toContain("still open")
  })

  it("writing frames to a slow reader leaves no listeners behind", async () => {
    const counts: Array<number> = []
    const server = createServer((_, res: ServerResponse) => {
      res.writeHead(200, { "content-type": "text/event-stream" })
      const big = new Uint8Array(256 * 1024).fill(120)
      const frames = Stream.range(1, 60).pipe(
        Stream.map(() => big),
        Stream.tap(() => Effect.sync(() => counts.push(res.listenerCount("close") + res.listenerCount("drain"))))
      )
      void Effect.runPromise(writeFrames(res, frames))
    })
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r))
    const port = (server.address() as { port: number }).port
    await new Promise<void>((resolve) => {
      request(`http://127.0.0.1:${port}/`, (res) => {
        res.on("data", () => {
          res.pause()
          setTimeout(() => res.resume(), 1)
        })
        res.on("end", resolve)
      }).end()
    })
    server.close()
    expect(counts.length).toBe(60)
    expect(Math.max(...counts)).toBeLessThanOrEqual(counts[0]! + 1)
  })
})
