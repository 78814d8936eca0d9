/**
 * A run's end frees its session before its end-of-run work waits for the check phase
 * (`afterSend`): a caller that saw the end and at once sends the next message gets a run that is
 * claimed at once — not recorded as queued behind a run that already ended — and that wait uses
 * Node's own `setImmediate`, so a test's fake timers cannot hold a run's end (or a shutdown) forever.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { afterEach, vi } from "vitest"
import { Caller, createPalyra, Gateway, RunHooks, ScriptedModel, scriptedModel, type TapeEvent } from "../src/index.js"
import { collect, gatewayLayer } from "../src/testing.js"

/** Each `RunAccepted`'s `queuedBehind`, in tape order. */
const queuedBehind = (tape: ReadonlyArray<TapeEvent.TapeEvent>) =>
  tape.flatMap((e) => (e._tag === "RunAccepted" ? [e.queuedBehind] : []))

/** `promise`, or a rejection after `ms`. */
const within = <A>(promise: Promise<A>, what: string, ms = 5000) =>
  Promise.race([
    promise,
    new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`${what} did not finish`)), ms))
  ])

describe("a run's end and the session's next run", () => {
  afterEach(() => {
    vi.unstubAllGlobals()
  })

  it("a caller that awaited a run's end starts the next one unqueued (Promise API)", async () => {
    const palyra = createPalyra({ model: scriptedModel(() => ({ text: "ok" })) })
    try {
      const a = await palyra.run("one", { sessionKey: "k" })
      const b = await palyra.run("two", { sessionKey: "k" })
      const c = await palyra.run("three", { sessionKey: "k" })
      assert.deepStrictEqual([a.state, b.state, c.state], ["Done", "Done", "Done"])
      assert.deepStrictEqual(queuedBehind(await palyra.readTape(c.sessionId)), [null, null, null])
    } finally {
      await palyra.close()
    }
  })

  it("runs and close finish while a test holds the global setImmediate (as fake timers do)", async () => {
    // What a test's fake timers do to `setImmediate`: queued callbacks wait for a clock nobody advances.
    vi.stubGlobal("setImmediate", () => undefined)
    const palyra = createPalyra({ model: scriptedModel(() => ({ text: "ok" })) })
    try {
      const a = await within(palyra.run("one", { sessionKey: "k" }), "the first run")
      const b = await within(palyra.run("two", { sessionKey: "k" }), "the second run")
      assert.deepStrictEqual([a.state, b.state], ["Done", "Done"])
    } finally {
      await within(palyra.close(), "close")
    }
  })

  it.live("a shutdown right after the end was seen still gives the hooks their quick verdict", () =>
    Effect.gen(function* () {
      const calls: Array<string> = []
      const hook = RunHooks.withQuick({ onRunEnd: () => Effect.sync(() => calls.push("onRunEnd")) }, () =>
        Effect.sync(() => calls.push("quick"))
      )
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const { events } = yield* gateway.startRun(Caller.user("alice"), { text: "hello" })
        yield* collect(events)
      }).pipe(
        Effect.provide(gatewayLayer({ model: ScriptedModel.make(() => ({ text: "ok" })), tools: [], runHooks: hook })),
        Effect.scoped
      )
      assert.deepStrictEqual(calls, ["quick"])
    })
  )
})
