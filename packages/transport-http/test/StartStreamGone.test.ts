/**
 * Streamed starts when things go away: a client gone while its start is still in admission has its
 * start interrupted (no run admitted for nobody), as the platform's client abort does for any
 * request; a chat client gone mid-answer ends its handler at once, not at the next frame; and on the
 * hot route too, a start that fails after its commit ends its body at once rather than at the next
 * keep-alive; and a body that fails on the server's side (a journal read failing mid-stream) is a
 * server failure in the request's span, not a client abort. Real servers on 127.0.0.1, `fetch`, a
 * recording tracer.
 */
import { Errors, type Follower, Gateway, ScriptedModel } from "@palyra/core"
import { gatewayLayer, recordingTracer } from "@palyra/core/testing"
import { Effect, Exit, Layer, Logger, ManagedRuntime, Scope } from "effect"
import { describe, expect, it } from "vitest"
import { HttpTransport } from "../src/index.js"

const options = { port: 0, tokens: [{ token: "alice-token", principal: "alice" }], heartbeatSeconds: 30 }
const ALICE = { authorization: "Bearer alice-token" }
const routes = {
  runs: () => {
    const form = new FormData()
    form.set("text", "hi") // multipart: the app's route
    return { path: "/v1/runs?stream=true", init: { method: "POST", headers: ALICE, body: form } }
  },
  fast: () => ({
    path: "/v1/runs?stream=true",
    init: {
      method: "POST",
      headers: { ...ALICE, "content-type": "application/json" },
      body: JSON.stringify({ text: "hi" })
    }
  }),
  chat: () => ({
    path: "/v1/chat/completions",
    init: {
      method: "POST",
      headers: { ...ALICE, "content-type": "application/json" },
      body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }], stream: true })
    }
  })
}
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

const served = async (
  gateway: Layer.Layer<Gateway.Gateway, never, Gateway.Gateway>,
  model: ScriptedModel.ScriptedTurn
) => {
  const runtime = ManagedRuntime.make(
    Layer.provideMerge(
      gateway,
      gatewayLayer({ model: ScriptedModel.make(() => model) }) as Layer.Layer<Gateway.Gateway>
    )
  )
  const { tracer, spans } = recordingTracer()
  const errors: Array<unknown> = []
  const logger = Logger.make(({ logLevel, message }) => {
    if (logLevel._tag === "Error") errors.push(...(Array.isArray(message) ? message : [message]))
  })
  const scope = await runtime.runPromise(Scope.make())
  const { url } = await runtime.runPromise(
    HttpTransport.serve(options).pipe(
      Effect.withTracer(tracer),
      Effect.provide(Logger.replace(Logger.defaultLogger, logger)),
      Scope.extend(scope)
    )
  )
  const close = async () => {
    await runtime.runPromise(Scope.close(scope, Exit.void))
    await runtime.dispose()
  }
  const serverStatus = (path: string) =>
    spans
      .filter((s) => s.kind === "server" && s.attributes.get("url.path") === path)
      .map((s) => s.attributes.get("http.response.status_code"))
  return { url, close, serverStatus, errors }
}

describe("streamed starts when the client or the start goes away", () => {
  for (const route of ["runs", "chat"] as const)
    it(`${route}: a client gone during admission interrupts the start (no run admitted)`, async () => {
      let admitted = 0
      let entered = 0
      const slow = Layer.effect(
        Gateway.Gateway,
        Effect.map(Gateway.Gateway, (g) => ({
          ...g,
          startRunFollowing: (...args: Parameters<Gateway.Service["startRunFollowing"]>) =>
            Effect.sync(() => entered++).pipe(
              Effect.zipRight(Effect.sleep("400 millis")),
              Effect.zipRight(g.startRunFollowing(...args)),
              Effect.tap(() => Effect.sync(() => admitted++))
            )
        }))
      )
      const server = await served(slow, { text: ["a", "b"] })
      const { path, init } = routes[route]()
      const abort = new AbortController()
      const answered = fetch(`${server.url}${path}`, { ...init, signal: abort.signal }).catch(() => undefined)
      for (let i = 0; i < 100 && entered === 0; i++) await sleep(10)
      abort.abort()
      await answered
      await sleep(700) // past the 400 ms the start would have taken
      await server.close()
      expect(entered).toBe(1)
      expect(admitted).toBe(0)
    })

  it("chat: a client gone mid-answer ends the handler at once (499), not at the next frame", async () => {
    const server = await served(Layer.effect(Gateway.Gateway, Gateway.Gateway), {
      text: ["a", "b", "c"],
      delayPerDelta: "4 seconds"
    })
    const { path, init } = routes.chat()
    const abort = new AbortController()
    const res = await fetch(`${server.url}${path}`, { ...init, signal: abort.signal })
    await res.body!.getReader().read()
    abort.abort()
    for (let i = 0; i < 150 && server.serverStatus("/v1/chat/completions").length === 0; i++) await sleep(10)
    const status = server.serverStatus("/v1/chat/completions") // within 1.5 s; the next delta is 4 s away
    await server.close()
    expect(status).toEqual([499])
  })

  for (const route of ["runs", "fast"] as const)
    it(`${route}: a start that fails after its commit ends its body at once, not at the next keep-alive`, async () => {
      const failing = Layer.effect(
        Gateway.Gateway,
        Effect.map(Gateway.Gateway, (g) => ({
          ...g,
          startRunFollowing: (...args: Parameters<Gateway.Service["startRunFollowing"]>) =>
            g.startRunFollowing(...args).pipe(
              Effect.tap((s) =>
                Effect.zipRight(
                  Effect.sleep("50 millis"),
                  Effect.sync(() => s.follower.close())
                )
              ),
              Effect.zipRight(Effect.fail(new Errors.Conflict({ message: "after the commit" })))
            )
        }))
      )
      const server = await served(failing, { text: ["Hello ", "there."], delayPerDelta: "200 millis" })
      const { path, init } = routes[route]()
      const abort = new AbortController()
      const timer = setTimeout(() => abort.abort(), 5_000) // the keep-alive is 30 s away
      const res = await fetch(`${server.url}${path}`, { ...init, signal: abort.signal })
      const text = await res.text().catch(() => "still open")
      clearTimeout(timer)
      await server.close()
      expect(text).toContain("event: RunAccepted")
      expect(text).not.toContain("still open")
    })

  for (const [route, answerLate] of [
    ["runs", false],
    ["runs", true],
    ["fast", false]
  ] as const)
    it(`${route}${answerLate ? " (its start answering late)" : ""}: a body that fails on the server's side mid-stream is a server failure, not a client abort`, async () => {
      // Its follower's second batch of events is a journal read failure.
      const failingSecond = (follower: Follower.Follower): Follower.Follower => {
        let batches = 0
        return {
          ...follower,
          take: () => {
            const ready = follower.take()
            if (Array.isArray(ready) && batches++ >= 1)
              return { failure: new Errors.JournalError({ message: "a read broke", method: "readTape" }) }
            return ready
          }
        }
      }
      const interrupted: Array<boolean> = []
      const wrapped = new Map<Follower.Follower, Follower.Follower>()
      const wrap = (f: Follower.Follower) => wrapped.get(f) ?? wrapped.set(f, failingSecond(f)).get(f)!
      const breaking = Layer.effect(
        Gateway.Gateway,
        Effect.map(Gateway.Gateway, (g) => ({
          ...g,
          startRunFollowing: (...[caller, request, options]: Parameters<Gateway.Service["startRunFollowing"]>) =>
            g
              .startRunFollowing(caller, request, {
                ...options,
                attached: (follower, run) => options?.attached?.(wrap(follower), run)
              })
              .pipe(
                Effect.map((started) => ({ ...started, follower: wrap(started.follower) })),
                // The body has begun (and failed) from the start commit before the call answers.
                Effect.tap(() => (answerLate ? Effect.sleep("600 millis") : Effect.void)),
                Effect.onInterrupt(() => Effect.sync(() => interrupted.push(true)))
              )
        }))
      )
      const server = await served(breaking, { text: ["a", "b", "c"], delayPerDelta: "100 millis" })
      const { path, init } = routes[route]()
      const res = await fetch(`${server.url}${path}`, init)
      await res.text().catch(() => "") // the connection is cut mid-body
      for (let i = 0; i < 150 && server.errors.length === 0; i++) await sleep(10)
      if (answerLate) await sleep(700)
      const status = server.serverStatus("/v1/runs")
      await server.close()
      expect(server.errors).toContain("request failed")
      expect(interrupted).toEqual([]) // the start is never taken for a client abort
      if (route === "runs") expect(status).toEqual([500])
    })
})
