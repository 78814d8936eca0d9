/**
 * `POST /v1/runs?stream=true` whose body began inside the start commit's publication, then the
 * server shuts down while the start call is still under way (the request's fiber interrupted after
 * the commit): the body ends cleanly — a complete chunked response after the committed frames — and
 * is not left open until the server destroys the socket. The journal answers a commit from a timer
 * (a macrotask, as the writer thread's answer is), so the body's first read parks on the follower
 * before the interrupted fiber resumes.
 */
import { request } from "node:http"
import { Gateway, Journal, MemoryJournal, ScriptedModel } from "@palyra/core"
import { gatewayLayer } from "@palyra/core/testing"
import { Effect, Exit, Layer, ManagedRuntime, Scope } from "effect"
import { expect, it } from "vitest"
import { HttpTransport } from "../src/index.js"

const model = ScriptedModel.make(() => ({ text: ["Hello ", "from ", "the start."] }))

// The in-memory journal, its plain append answered 50 ms later from a timer.
const timerJournal = Layer.effect(
  Journal.Journal,
  Effect.map(Journal.Journal, (inner): Journal.Service => {
    const append: Journal.Service["append"] = (sessionId, events, effects) =>
      Effect.zipRight(Effect.sleep("50 millis"), inner.append(sessionId, events, effects))
    return {
      ...inner,
      append: Journal.withAppendNow(append, (sessionId, events, effects, done) => {
        setTimeout(() => done(Effect.runSyncExit(inner.append(sessionId, events, effects))), 50)
      })
    }
  })
).pipe(Layer.provide(MemoryJournal.layer()))

let scope: Scope.CloseableScope
let closing: Promise<unknown> | undefined
// Shutdown begins while the start commit is being made (at the follower's attachment).
const shutdownMidStart = Layer.effect(
  Gateway.Gateway,
  Effect.map(Gateway.Gateway, (g) => ({
    ...g,
    startRunFollowing: (...[caller, req, options]: Parameters<Gateway.Service["startRunFollowing"]>) =>
      g.startRunFollowing(caller, req, {
        ...options,
        attached: (follower, run) => {
          options?.attached?.(follower, run)
          if (closing === undefined) closing = runtime.runPromise(Scope.close(scope, Exit.void))
        }
      })
  }))
)
const runtime = ManagedRuntime.make(
  Layer.provideMerge(shutdownMidStart, gatewayLayer({ model, journal: timerJournal }) as Layer.Layer<Gateway.Gateway>)
)

it("a stream begun from its start commit ends cleanly when shutdown interrupts the start", async () => {
  scope = await runtime.runPromise(Scope.make())
  const options = { port: 0, tokens: [{ token: "alice-token", principal: "alice" }], heartbeatSeconds: 15 }
  const url = (await runtime.runPromise(HttpTransport.serve(options).pipe(Scope.extend(scope)))).url
  const out = await new Promise<{ status?: number | undefined; how: string; text: string }>((resolve) => {
    const req = request(
      `${url}/v1/runs?stream=true`,
      { method: "POST", headers: { "content-type": "application/json", authorization: "Bearer alice-token" } },
      (res) => {
        let text = ""
        res.setEncoding("utf8")
        res.on("data", (chunk: string) => {
          text += chunk
        })
        res.on("end", () => resolve({ status: res.statusCode, how: res.complete ? "end" : "incomplete", text }))
        res.on("aborted", () => resolve({ status: res.statusCode, how: "aborted", text }))
        res.on("error", () => resolve({ status: res.statusCode, how: "error", text }))
      }
    )
    req.on("error", () => resolve({ how: "request error", text: "" }))
    req.end(JSON.stringify({ text: "hi" }))
  })
  await closing
  await runtime.dispose()
  expect(out.status).toBe(200)
  expect(out.text).toContain("event: RunAccepted")
  expect(out.how).toBe("end")
})
