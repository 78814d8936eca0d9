import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Caller, Errors, Gateway, Journal, Records, type RunHooks, ScriptedModel, Tool } from "@palyra/core"
import { Learning } from "@palyra/core/memory"
import { gatewayLayer } from "@palyra/core/testing"
import { Deferred, Effect, Option, Schedule, Schema } from "effect"
import { SqliteJournal, SqliteMemoryStore, SqliteTaskQueue } from "../src/index.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-learning-runend-"))
let files = 0
const fresh = () => join(dir, `palyra-${files++}.db`)

/** Calls the tools named in `call: a, b` one after the other, then answers. */
const model = () =>
  ScriptedModel.make((request) => {
    const user = [...request.messages].reverse().find((m) => m.role === "user")
    const text = user?.role === "user" ? user.text : ""
    const calls =
      /call: ([\w., ]+)/
        .exec(text)?.[1]
        ?.split(",")
        .map((s) => s.trim()) ?? []
    const done = request.messages.filter((m) => m.role === "tool").length
    return calls.length > done ? { toolCalls: [{ name: calls[done]!, args: {} }] } : { text: "Done." }
  })

const tool = (name: string, execute: () => Effect.Effect<string, Errors.ToolError>) =>
  Tool.make(name, { description: name, parameters: Schema.Struct({}), risk: "low", execute })

describe("RunHooks.RunEnd.events", () => {
  it.live(
    "after-run learning decides from the loop's events exactly as from the tape: plain, one tool, two tools, a failing tool, a failed run, cancelled runs",
    () =>
      Effect.gen(function* () {
        const filename = fresh()
        const store = yield* SqliteMemoryStore.make({ filename })
        const queue = yield* SqliteTaskQueue.make({ filename })
        const ends: Array<RunHooks.RunEnd> = []
        const hooks: RunHooks.Service = { onRunEnd: (end) => Effect.sync(() => ends.push(end)) }
        const started = yield* Deferred.make<void>()
        const tools = [
          tool("clock.read", () => Effect.succeed("12:00")),
          tool("calendar.list", () => Effect.succeed("nothing today")),
          tool("broken", () =>
            Effect.fail(new Errors.ToolError({ tool: "broken", reason: "failed", message: "it broke" }))
          ),
          tool("slow", () => Effect.zipRight(Deferred.succeed(started, undefined), Effect.as(Effect.never, "never")))
        ]
        yield* Effect.gen(function* () {
          const gateway = yield* Gateway.Gateway
          const journal = yield* Journal.Journal
          const learning = yield* Learning.make({ queue, store, journal, extractor: "deterministic" })
          const alice = Caller.user("alice")
          const send = (key: string, text: string) =>
            Effect.flatMap(gateway.sendMessage(alice, { key, text }), ({ run }) => gateway.awaitRun(alice, run.id))
          const states = [
            yield* send("plain", "Hello there, how are you?"),
            yield* send("fact", "Remember that the staging database listens on port 5433."),
            yield* send("one", "call: clock.read"),
            yield* send("two", "call: clock.read, calendar.list"),
            yield* send("two", "I like short answers. call: clock.read, broken, calendar.list"),
            // maxToolCalls is 3: the fourth call fails the run (Failed, after two ok results).
            yield* send("failed", "I prefer tea. call: clock.read, calendar.list, broken, clock.read")
          ].map((r) => r.state)
          assert.deepStrictEqual(states, ["Done", "Done", "Done", "Done", "Done", "Failed"])

          // A run cancelled while its tool runs, and one cancelled while queued behind it (never started).
          const { run: running } = yield* gateway.sendMessage(alice, { key: "cancel", text: "Call me Al. call: slow" })
          const { run: queued } = yield* gateway.sendMessage(alice, { key: "cancel", text: "Remember that x is 1." })
          yield* Deferred.await(started)
          yield* gateway.cancelRun(alice, queued.id)
          yield* gateway.cancelRun(alice, running.id)
          yield* Effect.sync(() => ends.length).pipe(
            Effect.repeat({ schedule: Schedule.spaced("10 millis"), until: (n) => n >= 8 }),
            Effect.timeout("10 seconds")
          )
          assert.strictEqual(ends.length, 8)

          let compared = 0
          const verdicts: Array<boolean> = []
          for (const end of ends) {
            const { run } = end
            const session = Option.getOrThrow(yield* journal.getSession(run.sessionId))
            const tape = yield* journal.readTape(run.sessionId, {
              afterSeq: Math.max(0, run.startSeq - 1),
              runId: run.id
            })
            const fromTape = yield* Learning.deterministic({ run, session, events: tape })
            if (end.events === undefined) {
              // Only a run its loop did not end (cancelled) comes without them: the hook reads as before.
              assert.strictEqual(run.state, "Cancelled")
            } else {
              compared++
              // The loop's events are the tape's, deltas aside.
              assert.deepStrictEqual(
                end.events.filter((e) => e._tag !== "AssistantDelta").map((e) => [e._tag, e.tapeSeq]),
                tape.filter((e) => e._tag !== "AssistantDelta").map((e) => [e._tag, e.tapeSeq])
              )
              assert.deepStrictEqual(yield* Learning.deterministic({ run, session, events: end.events }), fromTape)
              // The scheduler's quick verdict (no record): the same answer from the state and the events.
              assert.strictEqual(Learning.worthReflecting(run.state, end.events), fromTape.length > 0)
            }
            const withEvents = yield* learning.afterRun(run, end.events)
            const withRead = yield* learning.afterRun(run)
            assert.strictEqual(Option.isSome(withEvents), Option.isSome(withRead))
            assert.strictEqual(Option.isSome(withEvents), fromTape.length > 0)
            verdicts.push(Option.isSome(withEvents))
          }
          assert.strictEqual(compared, 6)
          // plain: nothing; fact; one tool: nothing; two tools: a procedure; a failing tool among two
          // ok ones: a preference and a procedure; failed: the preference only; the cancelled one
          // started: its preference; the one never started: nothing on its tape.
          const byInput = new Map(ends.map((e, i) => [e.run.input, verdicts[i]]))
          assert.strictEqual(byInput.get("Hello there, how are you?"), false)
          assert.strictEqual(byInput.get("call: clock.read"), false)
          assert.strictEqual(byInput.get("call: clock.read, calendar.list"), true)
          assert.strictEqual(byInput.get("I prefer tea. call: clock.read, calendar.list, broken, clock.read"), true)
          assert.strictEqual(byInput.get("Call me Al. call: slow"), true)
          assert.strictEqual(byInput.get("Remember that x is 1."), false)
        }).pipe(
          Effect.provide(
            gatewayLayer({
              model: model(),
              tools,
              budgets: { maxToolCalls: 3 },
              runHooks: hooks,
              journal: SqliteJournal.layer({ filename })
            })
          ),
          Effect.scoped
        )
      }).pipe(Effect.scoped)
  )

  it.live(
    "a run that fails before Start (its agent is no longer configured) hands over its events: no UserMessage, no proposal",
    () =>
      Effect.gen(function* () {
        const filename = fresh()
        const session = "01KA0000000000000000000SES" as never
        const runId = "01KA0000000000000000000RUN" as never
        // A queued run left by an earlier process, in a session bound to an agent since removed.
        yield* Effect.gen(function* () {
          const journal = yield* SqliteJournal.make({ filename })
          yield* journal.createSession(Records.makeSession({ id: session, principal: "alice", agentId: "gone" }))
          const base = { sessionId: session, runId, at: 1 }
          yield* journal.append(session, [{ _tag: "RunAccepted", ...base, principal: "alice", queuedBehind: null }], {
            createRun: {
              id: runId,
              sessionId: session,
              principal: "alice",
              state: "Pending",
              input: "Remember that the gate code is 4711.",
              startSeq: 1,
              error: null,
              createdAt: 1,
              updatedAt: 1
            }
          })
          yield* journal.append(
            session,
            [{ _tag: "RunStateChanged", ...base, from: "Pending", to: "Accepted", reason: "admitted" }],
            { runTransition: { runId, from: "Pending", to: "Accepted" } }
          )
        }).pipe(Effect.scoped)
        const store = yield* SqliteMemoryStore.make({ filename })
        const queue = yield* SqliteTaskQueue.make({ filename })
        const ended = yield* Deferred.make<RunHooks.RunEnd>()
        const hooks: RunHooks.Service = { onRunEnd: (end) => Deferred.succeed(ended, end) }
        yield* Effect.gen(function* () {
          const journal = yield* Journal.Journal
          const learning = yield* Learning.make({ queue, store, journal, extractor: "deterministic" })
          const end = yield* Deferred.await(ended).pipe(Effect.timeout("10 seconds"))
          assert.strictEqual(end.run.state, "Failed")
          assert.isDefined(end.events)
          const tape = yield* journal.readTape(session, { afterSeq: 0, runId })
          assert.deepStrictEqual(
            end.events!.map((e) => [e._tag, e.tapeSeq]),
            tape.map((e) => [e._tag, e.tapeSeq])
          )
          assert.notInclude(
            end.events!.map((e) => e._tag),
            "UserMessage"
          )
          const input = { run: end.run, session: Option.getOrThrow(yield* journal.getSession(session)) }
          assert.deepStrictEqual(yield* Learning.deterministic({ ...input, events: end.events! }), [])
          assert.deepStrictEqual(yield* Learning.deterministic({ ...input, events: tape }), [])
          assert.isTrue(Option.isNone(yield* learning.afterRun(end.run, end.events)))
          assert.isTrue(Option.isNone(yield* learning.afterRun(end.run)))
        }).pipe(
          Effect.provide(gatewayLayer({ model: model(), runHooks: hooks, journal: SqliteJournal.layer({ filename }) })),
          Effect.scoped
        )
      }).pipe(Effect.scoped)
  )
})
