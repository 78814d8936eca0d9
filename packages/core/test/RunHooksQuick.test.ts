/**
 * A run hook's quick verdict (`RunHooks.withQuick`): decided from the run's terminal state and
 * its loop's events, it ends a run without the run's record read back and without a hook fiber;
 * a run it cannot judge, a check that throws, and a run somebody awaits still get the record.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schedule } from "effect"
import { Caller, Gateway, Journal, MemoryJournal, RunHooks, ScriptedModel, type TapeEvent } from "../src/index.js"
import { gatewayLayer, recordingTracer } from "../src/testing.js"
import { countingReads } from "./helpers.js"

const alice = Caller.user("alice")

const said = (events: ReadonlyArray<TapeEvent.TapeEvent>) =>
  events.flatMap((e) => (e._tag === "UserMessage" ? [e.text] : [])).join(" ")

/** Polls `read` (a real delay between reads) until it holds `n` items. */
const until = (read: () => number, n: number) =>
  Effect.sync(read).pipe(
    Effect.repeat({ schedule: Schedule.spaced("5 millis"), until: (m) => m >= n }),
    Effect.timeout("5 seconds")
  )

describe("RunHooks quick verdicts", () => {
  it.live("a quick verdict ends a run without its record or a hook; what it cannot judge gets onRunEnd", () =>
    Effect.gen(function* () {
      const { journal, reads } = countingReads(yield* MemoryJournal.make())
      const quick: Array<[string, string, string]> = []
      const ends: Array<RunHooks.RunEnd> = []
      const hook = RunHooks.withQuick({ onRunEnd: (end) => Effect.sync(() => ends.push(end)) }, (state, events) => {
        const text = said(events)
        if (text.includes("boom")) throw new Error("a broken check")
        if (text.includes("deep")) return undefined
        const last = events.at(-1)!
        return Effect.sync(() => quick.push([state, text, last._tag]))
      })
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const { run: plain } = yield* gateway.sendMessage(alice, { key: "k", text: "hello" })
        yield* until(() => quick.length, 1)
        assert.deepStrictEqual(quick, [["Done", "hello", "RunStateChanged"]])
        assert.strictEqual(reads.runs, 0, "no run record read for a quick end")
        assert.strictEqual(ends.length, 0)

        const { run: deep } = yield* gateway.sendMessage(alice, { key: "k", text: "deep question" })
        yield* until(() => ends.length, 1)
        assert.strictEqual(reads.runs, 1)
        assert.strictEqual(ends[0]!.run.id, deep.id)
        assert.strictEqual(ends[0]!.run.state, "Done")
        assert.deepStrictEqual(
          ends[0]!.events?.map((e) => e._tag).at(-1),
          "RunStateChanged",
          "the hook gets the loop's events"
        )

        // A check that throws is not trusted: the hook decides from the record.
        const { run: broken } = yield* gateway.sendMessage(alice, { key: "k", text: "boom" })
        yield* until(() => ends.length, 2)
        assert.strictEqual(ends[1]!.run.id, broken.id)
        assert.strictEqual(reads.runs, 2)

        // Somebody awaits the run: its record is read for them, the hook's verdict is still quick.
        const { run: awaited } = yield* gateway.sendMessage(alice, { key: "k", text: "hello again" })
        const done = yield* gateway.awaitRun(alice, awaited.id)
        assert.strictEqual(done.state, "Done")
        yield* until(() => quick.length, 2)
        assert.deepStrictEqual(quick[1], ["Done", "hello again", "RunStateChanged"])
        assert.strictEqual(ends.length, 2)
        assert.notStrictEqual(plain.id, awaited.id)
      }).pipe(
        Effect.provide(
          gatewayLayer({
            model: ScriptedModel.make(() => ({ text: "ok" })),
            tools: [],
            runHooks: hook,
            journal: Layer.succeed(Journal.Journal, journal)
          })
        ),
        Effect.scoped
      )
    })
  )

  // With a tracer installed the hooks run as `onRunEnd` does, with its span: traces keep showing
  // every run's after-run work.
  it.live("with a tracer, a run the check could judge still gets onRunEnd and its span", () =>
    Effect.gen(function* () {
      const { tracer, spans } = recordingTracer()
      const quick: Array<string> = []
      const ends: Array<RunHooks.RunEnd> = []
      const hook = RunHooks.withQuick({ onRunEnd: (end) => Effect.sync(() => ends.push(end)) }, () =>
        Effect.sync(() => quick.push("quick"))
      )
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const { run } = yield* gateway.sendMessage(alice, { key: "k", text: "hello" })
        yield* until(() => ends.length, 1)
        assert.strictEqual(ends[0]!.run.id, run.id)
        assert.deepStrictEqual(quick, [])
      }).pipe(
        Effect.provide(gatewayLayer({ model: ScriptedModel.make(() => ({ text: "ok" })), tools: [], runHooks: hook })),
        Effect.scoped,
        Effect.withTracer(tracer)
      )
      const span = spans.find((s) => s.name === "RunHooks.onRunEnd")
      assert.isDefined(span, "the after-run span is recorded")
      assert.strictEqual(span!.attributes.get("state"), "Done")
    })
  )

  it("RunHooks.all is quick only when every hook is, and only for ends every hook can judge", () => {
    const seen: Array<string> = []
    const a = RunHooks.withQuick({ onRunEnd: () => Effect.void }, () => Effect.sync(() => seen.push("a")))
    const b = RunHooks.withQuick({ onRunEnd: () => Effect.void }, (state) =>
      state === "Done" ? Effect.sync(() => seen.push("b")) : undefined
    )
    const plain: RunHooks.Service = { onRunEnd: () => Effect.void }
    assert.isUndefined(RunHooks.quickOf(RunHooks.all([a, plain])))
    const both = RunHooks.quickOf(RunHooks.all([a, b]))!
    assert.isUndefined(both("Failed", []))
    Effect.runSync(both("Done", [])!)
    assert.deepStrictEqual(seen, ["a", "b"])
  })

  it("RunHooks.all: one hook's failing verdict does not keep the next from hearing of the run", () => {
    const seen: Array<string> = []
    const dies = RunHooks.withQuick({ onRunEnd: () => Effect.void }, () => Effect.die("a broken hook"))
    const fine = RunHooks.withQuick({ onRunEnd: () => Effect.void }, () => Effect.sync(() => seen.push("fine")))
    Effect.runSync(RunHooks.quickOf(RunHooks.all([dies, fine]))!("Done", [])!)
    assert.deepStrictEqual(seen, ["fine"])
  })

  it("a decorator that replaces onRunEnd is never skipped by the verdict of what it wraps", () => {
    const inner = RunHooks.withQuick({ onRunEnd: () => Effect.void }, () => Effect.void)
    assert.isDefined(RunHooks.quickOf(inner))
    assert.isDefined(RunHooks.quickOf({ ...inner }), "the same onRunEnd keeps its verdict")
    const wrapped: RunHooks.Service = { ...inner, onRunEnd: (end) => Effect.zipRight(Effect.void, inner.onRunEnd(end)) }
    assert.isUndefined(RunHooks.quickOf(wrapped))
  })
})
