/**
 * A run's end frees its session before its end-of-run work waits for the check phase
 * (`afterSend`): a caller that saw the end and at once sends the next message gets a run that is
 * claimed at once — not recorded as queued behind a run that already ended — and that wait uses
 * Node's own `setImmediate`, so a test's fake timers cannot hold a run's end (or a shutdown) forever.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schedule } from "effect"
import { afterEach, vi } from "vitest"
import { Caller, createPalyra, Gateway, RunHooks, ScriptedModel, scriptedModel, type TapeEvent } from "../src/index.js"
import { collect, gatewayLayer } from "../src/testing.js"
import { recordingTool, withGateway } from "./helpers.js"

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
  it.live("the ended run's quick verdict runs before the session's next run starts (RunHooks.Quick)", () =>
    Effect.gen(function* () {
      const log: Array<string> = []
      const hook = RunHooks.withQuick({ onRunEnd: () => Effect.void }, (_state, events) => {
        log.push(`quick:${events.at(-1)?.runId}`)
        return Effect.void
      })
      const model = ScriptedModel.make((request) => {
        log.push(`model:${JSON.stringify(request.messages.at(-1)).includes("two") ? "two" : "one"}`)
        return { text: "ok" }
      })
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const a = yield* gateway.sendMessage(Caller.user("alice"), { key: "k", text: "one" })
        const b = yield* gateway.sendMessage(Caller.user("alice"), { key: "k", text: "two" })
        yield* gateway.awaitRun(Caller.user("alice"), b.run.id)
        yield* Effect.sync(() => log.filter((l) => l.startsWith("quick")).length).pipe(
          Effect.repeat({ schedule: Schedule.spaced("5 millis"), until: (n) => n >= 2 }),
          Effect.timeout("5 seconds")
        )
        assert.deepStrictEqual(log, ["model:one", `quick:${a.run.id}`, "model:two", `quick:${b.run.id}`])
      }).pipe(Effect.provide(gatewayLayer({ model, tools: [], runHooks: hook })), Effect.scoped)
    })
  )

  it.live(
    "a run queued behind an ended one fails closed when nobody can approve (the ended run's hold released first)",
    () =>
      Effect.gen(function* () {
        const { tool, calls } = recordingTool("fs.write", "sensitive")
        const model = ScriptedModel.make((request) =>
          request.messages.at(-1)?.role === "tool"
            ? { text: "done" }
            : JSON.stringify(request.messages.at(-1)).includes("write")
              ? { toolCalls: [{ name: "fs.write", args: { x: 1 } }] }
              : { text: "hi" }
        )
        const alice = Caller.user("alice")
        const op = Caller.operator("op")
        yield* withGateway({ model, tools: [tool] }, (gateway) =>
          Effect.gen(function* () {
            // A's caller holds an approval channel (a started stream it does not read); its run's end releases it.
            const a = yield* gateway.startRun(alice, { key: "k", text: "hello" })
            const b = yield* gateway.sendMessage(alice, { key: "k", text: "write" })
            yield* gateway.awaitRun(op, a.run.id)
            const ended = yield* gateway.awaitRun(op, b.run.id).pipe(Effect.timeout("5 seconds"), Effect.option)
            assert.isTrue(ended._tag === "Some", "B waits for an approval nobody can answer")
            if (ended._tag === "Some") assert.notStrictEqual(ended.value.state, "WaitingForApproval")
            assert.strictEqual(calls.length, 0)
          })
        )
      })
  )
})
