/**
 * How a run's events are grouped into appends (each append is one journal commit): a `ModelRequest`
 * commits with the model's first output, and an answer that proposes tool calls commits with its
 * first call's decision. The tape's content and order are what they were; what is staged is never
 * visible before it commits, is counted in the session's tokens, and survives a cancellation.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Metric, Schedule } from "effect"
import {
  Caller,
  Gateway,
  Journal,
  MemoryJournal,
  Metrics,
  type ModelProvider,
  ScriptedModel,
  type TapeEvent
} from "../src/index.js"
import { collect, gatewayLayer, tags } from "../src/testing.js"
import { recordingTool } from "./helpers.js"

/**
 * A memory journal that records what each append stored, as one group per commit, and which
 * commits created a session (inside an append, or on their own: `createSession`, one commit more).
 */
const recordingJournal = () => {
  const groups: Array<ReadonlyArray<TapeEvent.TapeEvent>> = []
  const sessions = { inAppend: 0, alone: 0 }
  const layer = Layer.effect(
    Journal.Journal,
    Effect.map(Journal.Journal, (inner) => ({
      ...inner,
      createSession: (session) =>
        Effect.zipLeft(
          inner.createSession(session),
          Effect.sync(() => sessions.alone++)
        ),
      append: (sessionId, events, effects) =>
        Effect.tap(inner.append(sessionId, events, effects), (stored) =>
          Effect.sync(() => {
            groups.push(stored)
            if (effects?.createSession !== undefined) sessions.inAppend++
          })
        )
    }))
  ).pipe(Layer.provide(MemoryJournal.layer()))
  return { groups, sessions, layer }
}

const usage = { inputTokens: 7, outputTokens: 3 }

describe("the loop's appends", () => {
  it.effect(
    "a plain turn on a new session commits twice: the session with the admission and start, then the answer",
    () =>
      Effect.gen(function* () {
        const { groups, sessions, layer } = recordingJournal()
        const model = ScriptedModel.make([{ text: ["Hel", "lo"], usage }])
        const seen = yield* Effect.gen(function* () {
          const gateway = yield* Gateway.Gateway
          const { events } = yield* gateway.startRun(Caller.user("alice"), { text: "hi" })
          return yield* collect(events)
        }).pipe(Effect.provide(gatewayLayer({ model, journal: layer })), Effect.scoped)
        assert.deepStrictEqual(groups.map(tags), [
          ["RunAccepted", "RunStateChanged", "UserMessage", "RunStateChanged"],
          ["ModelRequest", "AssistantDelta", "AssistantMessage", "Usage", "RunStateChanged"]
        ])
        const states = groups[0]!.flatMap((e) => (e._tag === "RunStateChanged" ? [`${e.from}→${e.to}`] : []))
        assert.deepStrictEqual(states, ["Pending→Accepted", "Accepted→InProgress"])
        // The new session was created inside the first commit, not by a commit of its own.
        assert.deepStrictEqual(sessions, { inAppend: 1, alone: 0 })
        // The subscriber saw exactly what was committed, in order.
        assert.deepStrictEqual(
          tags(seen),
          groups.flat().map((e) => e._tag)
        )
      })
  )

  it.effect("a run queued behind another is admitted alone and records its Start when it actually starts", () =>
    Effect.gen(function* () {
      const { groups, layer } = recordingJournal()
      const model = ScriptedModel.make([
        { text: "one", usage },
        { text: "two", usage }
      ])
      const alice = Caller.user("alice")
      const [first, second] = yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        // Both admitted in the same fiber step sequence: the second queues behind the first.
        const first = yield* gateway.sendMessage(alice, { text: "a", key: "k" })
        const second = yield* gateway.sendMessage(alice, { text: "b", key: "k" })
        return [yield* gateway.awaitRun(alice, first.run.id), yield* gateway.awaitRun(alice, second.run.id)] as const
      }).pipe(Effect.provide(gatewayLayer({ model, journal: layer })), Effect.scoped)
      assert.deepStrictEqual([first.state, second.state], ["Done", "Done"])
      const ofRun = (id: string) => groups.filter((g) => g[0]?.runId === id).map(tags)
      assert.deepStrictEqual(ofRun(first.id)[0], ["RunAccepted", "RunStateChanged", "UserMessage", "RunStateChanged"])
      assert.deepStrictEqual(ofRun(second.id).slice(0, 2), [
        ["RunAccepted", "RunStateChanged"],
        ["UserMessage", "RunStateChanged"]
      ])
      const accepted = groups.flat().find((e) => e._tag === "RunAccepted" && e.runId === second.id)
      assert.strictEqual(accepted?._tag === "RunAccepted" ? accepted.queuedBehind : undefined, first.id)
      // One run at a time: the second's start comes after the first's Done, and the tape is gap-free.
      const tape = groups.flat()
      const doneAt = tape.findIndex((e) => e._tag === "RunStateChanged" && e.runId === first.id && e.to === "Done")
      const startAt = tape.findIndex((e) => e._tag === "UserMessage" && e.runId === second.id)
      assert.isTrue(doneAt >= 0 && doneAt < startAt)
      assert.deepStrictEqual(
        tape.map((e) => e.tapeSeq),
        tape.map((_, i) => i + 1)
      )
    })
  )

  it.effect("a one-tool turn commits four times; the staged answer's tokens are on the session", () =>
    Effect.gen(function* () {
      const { groups, layer } = recordingJournal()
      const { tool, calls } = recordingTool("calc", "low")
      const model = ScriptedModel.make([
        { toolCalls: [{ name: "calc", args: { x: 2 } }], usage },
        { text: "4", usage }
      ])
      // The call's latency is recorded under its tool and outcome (the tagged metric is built once).
      const latency = Metric.tagged(Metric.tagged(Metrics.toolCallLatency, "tool", "calc"), "outcome", "ok")
      const recorded = (yield* Metric.value(latency)).count
      const session = yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const { events, session } = yield* gateway.startRun(Caller.user("alice"), { text: "double 2" })
        yield* collect(events)
        return yield* gateway.getSession(Caller.user("alice"), session.id)
      }).pipe(Effect.provide(gatewayLayer({ model, tools: [tool], journal: layer })), Effect.scoped)
      assert.deepStrictEqual(calls, [{ x: 2 }])
      assert.deepStrictEqual(groups.map(tags), [
        ["RunAccepted", "RunStateChanged", "UserMessage", "RunStateChanged"],
        ["ModelRequest", "AssistantMessage", "ToolProposed", "Usage", "PolicyDecided", "ToolStarted"],
        ["ToolResult"],
        ["ModelRequest", "AssistantDelta", "AssistantMessage", "Usage", "RunStateChanged"]
      ])
      const tape = groups.flat()
      assert.deepStrictEqual(
        tape.map((e) => e.tapeSeq),
        tape.map((_, i) => i + 1)
      )
      assert.strictEqual(session.tokensUsed, 2 * (usage.inputTokens + usage.outputTokens))
      assert.strictEqual((yield* Metric.value(latency)).count, recorded + 1)
    })
  )

  it.effect("a denied proposal commits with its decision, then its result; the model answers again", () =>
    Effect.gen(function* () {
      const { groups, layer } = recordingJournal()
      const { tool, calls } = recordingTool("wipe", "critical")
      const model = ScriptedModel.make([{ toolCalls: [{ name: "wipe", args: { x: 1 } }] }, { text: "cannot" }])
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const { events } = yield* gateway.startRun(Caller.user("alice"), { text: "wipe it" })
        yield* collect(events)
      }).pipe(Effect.provide(gatewayLayer({ model, tools: [tool], journal: layer })), Effect.scoped)
      assert.deepStrictEqual(calls, [])
      assert.deepStrictEqual(groups.map(tags).slice(1, 3), [
        ["ModelRequest", "AssistantMessage", "ToolProposed", "PolicyDecided"],
        ["ToolResult"]
      ])
      const result = groups.flat().find((e) => e._tag === "ToolResult")
      assert.strictEqual(result?._tag === "ToolResult" ? result.status : undefined, "denied")
    })
  )

  it.live("a run cancelled while its model has not answered keeps the request on the tape, before Cancelled", () =>
    Effect.gen(function* () {
      const model = ScriptedModel.make([{ text: ["late"], delayPerDelta: "1 hour" }])
      const tape = yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const { run } = yield* gateway.sendMessage(Caller.user("alice"), { text: "hi" })
        // The model has the request (it waits an hour before its first delta): nothing committed it yet.
        yield* Effect.sync(() => model.prompts.length).pipe(
          Effect.repeat({ schedule: Schedule.spaced("5 millis"), until: (n) => n > 0 })
        )
        const before = yield* gateway.readTape(Caller.user("alice"), run.sessionId, { afterSeq: 0 })
        assert.notInclude(tags(before), "ModelRequest")
        const cancelled = yield* gateway.cancelRun(Caller.user("alice"), run.id)
        assert.strictEqual(cancelled.state, "Cancelled")
        return yield* gateway.readTape(Caller.user("alice"), run.sessionId, { afterSeq: 0 })
      }).pipe(Effect.provide(gatewayLayer({ model })), Effect.scoped)
      assert.deepStrictEqual(tags(tape).slice(-2), ["ModelRequest", "RunStateChanged"])
      const last = tape.at(-1)
      assert.strictEqual(last?._tag === "RunStateChanged" ? last.to : undefined, "Cancelled")
    })
  )

  it.live("a run parked at shutdown writes what it staged: the request is on the tape for the next start", () =>
    Effect.gen(function* () {
      const journal = yield* Journal.Journal
      const model = ScriptedModel.make([{ text: ["late"], delayPerDelta: "1 hour" }])
      const run = yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const { run } = yield* gateway.sendMessage(Caller.user("alice"), { text: "hi" })
        yield* Effect.sync(() => model.prompts.length).pipe(
          Effect.repeat({ schedule: Schedule.spaced("5 millis"), until: (n) => n > 0 })
        )
        return run
      }).pipe(Effect.provide(gatewayLayer({ model, journal: Layer.succeed(Journal.Journal, journal) })), Effect.scoped)
      // The Gateway closed (the run parked InProgress); the journal it wrote to is still open.
      const tape = yield* journal.readTape(run.sessionId, { afterSeq: 0 })
      assert.deepStrictEqual(tags(tape).slice(-2), ["RunStateChanged", "ModelRequest"])
      const parked = yield* journal.getRun(run.id)
      assert.strictEqual(parked._tag === "Some" ? parked.value.state : undefined, "InProgress")
    }).pipe(Effect.provide(MemoryJournal.layer()))
  )

  it.effect("a run's stream is an approval channel until the run ends, then no longer", () =>
    Effect.gen(function* () {
      const { tool, calls } = recordingTool("fs.write", "sensitive")
      const model = ScriptedModel.make((request) =>
        request.messages.at(-1)?.role === "tool"
          ? { text: "done" }
          : { toolCalls: [{ name: "fs.write", args: { x: 1 } }] }
      )
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const alice = Caller.user("alice")
        // With its stream open, the run waits for an approval (someone can answer it)...
        const first = yield* gateway.startRun(alice, { text: "write", key: "k" })
        const streamed = yield* Effect.fork(collect(first.events))
        const pending = yield* gateway
          .listApprovals(Caller.operator("op"), { runId: first.run.id, status: "pending" })
          .pipe(Effect.repeat({ until: (l) => l.length > 0 }))
        yield* gateway.resolveApproval(Caller.operator("op"), { approvalId: pending[0]!.id, decision: "approve" })
        yield* streamed.await
        assert.deepStrictEqual(calls, [{ x: 1 }])
        // ...and once it ended, the session has no approval channel: the next run fails closed.
        const second = yield* gateway.sendMessage(alice, { text: "write again", key: "k" })
        yield* gateway.awaitRun(alice, second.run.id)
        const tape = yield* gateway.readTape(alice, second.session.id, { afterSeq: second.run.startSeq - 1 })
        const result = tape.find((e) => e._tag === "ToolResult")
        assert.strictEqual(result?._tag === "ToolResult" ? result.status : undefined, "denied")
        assert.include(result?._tag === "ToolResult" ? result.output : "", "no approval channel")
        assert.deepStrictEqual(calls, [{ x: 1 }])
      }).pipe(Effect.provide(gatewayLayer({ model, tools: [tool] })), Effect.scoped)
    })
  )
})

describe("deltas read together are appended together", () => {
  const deltas = Array.from({ length: 10 }, (_, i) => `w${i} `)
  const run = (model: ModelProvider.Service, liveBufferEvents?: number) =>
    Effect.gen(function* () {
      const { groups, layer } = recordingJournal()
      const seen = yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const { events } = yield* gateway.startRun(Caller.user("alice"), { text: "hi" })
        return yield* collect(events)
      }).pipe(
        Effect.provide(
          gatewayLayer({
            model,
            journal: layer,
            coalesceChars: 1,
            ...(liveBufferEvents === undefined ? {} : { liveBufferEvents })
          })
        ),
        Effect.scoped
      )
      return { groups, seen }
    })
  const deltaTexts = (events: ReadonlyArray<TapeEvent.TapeEvent>) =>
    events.flatMap((e) => (e._tag === "AssistantDelta" ? [e.text] : []))

  it.effect("an unpaced burst (the provider says `more`) is one append, each delta still its own event", () =>
    Effect.gen(function* () {
      const { groups, seen } = yield* run(ScriptedModel.make([{ text: deltas, usage }], { recordPrompts: false }))
      assert.deepStrictEqual(groups.map(tags), [
        ["RunAccepted", "RunStateChanged", "UserMessage", "RunStateChanged"],
        ["ModelRequest", ...deltas.map(() => "AssistantDelta")],
        ["AssistantMessage", "Usage", "RunStateChanged"]
      ])
      assert.deepStrictEqual(deltaTexts(groups.flat()), deltas)
      assert.deepStrictEqual(
        tags(seen),
        groups.flat().map((e) => e._tag)
      )
    })
  )

  it.effect(
    "a burst is cut into appends of half the live buffer: a subscriber keeping up is never cut off by one",
    () =>
      Effect.gen(function* () {
        const many = Array.from({ length: 20 }, (_, i) => `w${i} `)
        // Live buffer 8: appends of at most 4 deltas (one of 20 would cut the run's own subscriber off).
        const { groups, seen } = yield* run(ScriptedModel.make([{ text: many, usage }], { recordPrompts: false }), 8)
        const deltaGroups = groups.map((g) => g.filter((e) => e._tag === "AssistantDelta").length).filter((n) => n > 0)
        assert.deepStrictEqual(deltaGroups, [4, 4, 4, 4, 4])
        assert.deepStrictEqual(deltaTexts(seen), many)
        const last = seen.at(-1)
        assert.isTrue(last?._tag === "RunStateChanged" && last.to === "Done")
      })
  )

  it.effect(
    "a burst of long deltas is cut at about 16 KiB of text per append (a long commit holds up the writer)",
    () =>
      Effect.gen(function* () {
        const long = Array.from({ length: 5 }, (_, i) => `w${i}xy `.repeat(1200))
        const { groups, seen } = yield* run(ScriptedModel.make([{ text: long, usage }], { recordPrompts: false }))
        const deltaGroups = groups.map((g) => g.filter((e) => e._tag === "AssistantDelta").length).filter((n) => n > 0)
        assert.deepStrictEqual(deltaGroups, [3, 2])
        assert.deepStrictEqual(deltaTexts(seen), long)
      })
  )

  it.effect("a provider that does not say `more` gets one append per delta, as before", () =>
    Effect.gen(function* () {
      const full = ScriptedModel.make([{ text: deltas, usage }], { recordPrompts: false })
      // The same model without its plain form: the loop's sink is called lazily, one event at a time.
      const { groups } = yield* run({ name: full.name, stream: full.stream, streamTo: full.streamTo! })
      assert.deepStrictEqual(groups.map(tags).slice(1, -1), [
        ["ModelRequest", "AssistantDelta"],
        ...deltas.slice(1).map(() => ["AssistantDelta"])
      ])
      assert.deepStrictEqual(deltaTexts(groups.flat()), deltas)
    })
  )

  it.live("a paced model's deltas are each appended when read: nothing is held across a wait", () =>
    Effect.gen(function* () {
      const { groups } = yield* run(
        ScriptedModel.make([{ text: deltas.slice(0, 4), usage, delayPerDelta: "1 millis" }], { recordPrompts: false })
      )
      assert.deepStrictEqual(groups.map(tags).slice(1, -1), [
        ["ModelRequest", "AssistantDelta"],
        ["AssistantDelta"],
        ["AssistantDelta"],
        ["AssistantDelta"]
      ])
    })
  )
})
