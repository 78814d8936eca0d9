import { assert, describe, it } from "@effect/vitest"
import { Chunk, Deferred, Effect, Fiber, Layer, Option, Schema, Stream, TestClock } from "effect"
import { Caller, Gateway, Journal, MemoryJournal, ScriptedModel, TapeEvent, Tool } from "../src/index.js"
import { collect, gapFree, gatewayLayer, tags } from "../src/testing.js"
import { pendingApproval, recordingTool, withGateway } from "./helpers.js"

type Ev = TapeEvent.TapeEvent
const only = <T extends Ev["_tag"]>(events: ReadonlyArray<Ev>, tag: T) =>
  events.filter((e): e is TapeEvent.TapeEventOf<T> => e._tag === tag)
const finalState = (events: ReadonlyArray<Ev>) => only(events, "RunStateChanged").at(-1)?.to

describe("Gateway + AgentLoop", () => {
  it.effect("a plain answer: streamed, coalesced, journaled in order", () =>
    Effect.gen(function* () {
      const model = ScriptedModel.make([
        { text: ["Hel", "lo", ", ", "world", "!"], usage: { inputTokens: 5, outputTokens: 3 } }
      ])
      yield* withGateway({ model, coalesceChars: 6 }, (gateway, journal) =>
        Effect.gen(function* () {
          const { run, events } = yield* gateway.startRun(Caller.user("alice"), { text: "hi" })
          const seen = yield* collect(events)
          assert.deepStrictEqual(tags(seen), [
            "RunAccepted",
            "RunStateChanged",
            "UserMessage",
            "RunStateChanged",
            "ModelRequest",
            "AssistantDelta",
            "AssistantDelta",
            "AssistantMessage",
            "Usage",
            "RunStateChanged"
          ])
          assert.strictEqual(gapFree(seen), undefined)
          assert.deepStrictEqual(
            only(seen, "AssistantDelta").map((d) => d.text),
            ["Hello, ", "world!"]
          )
          assert.strictEqual(only(seen, "AssistantMessage")[0]!.text, "Hello, world!")
          assert.strictEqual(finalState(seen), "Done")
          const stored = yield* journal.readTape(run.sessionId, { afterSeq: 0 })
          assert.deepStrictEqual(stored, seen)
          assert.strictEqual((yield* gateway.getRun(Caller.operator("op"), run.id)).state, "Done")
          const session = yield* gateway.getSession(Caller.operator("op"), run.sessionId)
          assert.strictEqual(session.tokensUsed, 8)
          assert.deepStrictEqual(model.prompts[0]!.messages, [{ role: "user", text: "hi" }])
        })
      )
    })
  )

  it.effect("a tool allowed by policy runs, its result goes back to the model", () =>
    Effect.gen(function* () {
      const { tool, calls } = recordingTool("math.double", "low")
      const model = ScriptedModel.make([{ toolCalls: [{ name: "math.double", args: { x: 21 } }] }, { text: "42" }])
      yield* withGateway({ model, tools: [tool] }, (gateway) =>
        Effect.gen(function* () {
          const { events } = yield* gateway.startRun(Caller.user("alice"), { text: "double 21" })
          const seen = yield* collect(events)
          assert.deepStrictEqual(calls, [{ x: 21 }])
          const decided = only(seen, "PolicyDecided")[0]!
          assert.strictEqual(decided.decision, "allow")
          assert.deepStrictEqual(decided.policyIds, ["default.low-risk-allowed"])
          const result = only(seen, "ToolResult")[0]!
          assert.strictEqual(result.status, "ok")
          assert.strictEqual(result.output, '{"doubled":42}')
          // intent → decision → started → result, in that order
          const order = seen
            .filter((e) => ["ToolProposed", "PolicyDecided", "ToolStarted", "ToolResult"].includes(e._tag))
            .map((e) => e._tag)
          assert.deepStrictEqual(order, ["ToolProposed", "PolicyDecided", "ToolStarted", "ToolResult"])
          const second = model.prompts[1]!.messages
          assert.strictEqual(second.at(-1)!.role, "tool")
          assert.strictEqual(finalState(seen), "Done")
        })
      )
    })
  )

  it.effect("a denied call never runs; the model sees the denial and the run continues", () =>
    Effect.gen(function* () {
      const { tool, calls } = recordingTool("disk.wipe", "critical")
      const model = ScriptedModel.make([
        { toolCalls: [{ name: "disk.wipe", args: { x: 1 } }] },
        { text: "I cannot do that." }
      ])
      yield* withGateway({ model, tools: [tool] }, (gateway) =>
        Effect.gen(function* () {
          const seen = yield* collect((yield* gateway.startRun(Caller.user("alice"), { text: "wipe" })).events)
          assert.deepStrictEqual(calls, [])
          assert.strictEqual(only(seen, "PolicyDecided")[0]!.decision, "deny")
          assert.deepStrictEqual(only(seen, "PolicyDecided")[0]!.policyIds, ["default.critical-denied"])
          assert.strictEqual(only(seen, "ToolResult")[0]!.status, "denied")
          assert.include(
            model.prompts[1]!.messages.at(-1)!.role === "tool"
              ? (model.prompts[1]!.messages.at(-1) as { output: string }).output
              : "",
            "denied"
          )
          assert.strictEqual(finalState(seen), "Done")
          assert.isFalse(tags(seen).includes("ToolStarted"))
        })
      )
    })
  )

  it.effect("deny by default: a tool no policy permits does not run", () =>
    Effect.gen(function* () {
      const { tool, calls } = recordingTool("x.unknown", "low")
      const model = ScriptedModel.make([{ toolCalls: [{ name: "x.unknown", args: { x: 1 } }] }, { text: "ok" }])
      yield* withGateway({ model, tools: [tool], rules: [] }, (gateway) =>
        Effect.gen(function* () {
          const seen = yield* collect((yield* gateway.startRun(Caller.user("alice"), { text: "go" })).events)
          assert.deepStrictEqual(calls, [])
          const d = only(seen, "PolicyDecided")[0]!
          assert.strictEqual(d.decision, "deny")
          assert.deepStrictEqual(d.policyIds, [])
          assert.match(d.reasons[0]!, /deny by default/)
        })
      )
    })
  )

  it.effect("invalid arguments go back to the model as a tool error, the body never runs", () =>
    Effect.gen(function* () {
      const { tool, calls } = recordingTool("math.double", "low")
      const model = ScriptedModel.make([
        { toolCalls: [{ name: "math.double", args: { x: "nope" } }] },
        { text: "sorry" }
      ])
      yield* withGateway({ model, tools: [tool] }, (gateway) =>
        Effect.gen(function* () {
          const seen = yield* collect((yield* gateway.startRun(Caller.user("alice"), { text: "go" })).events)
          assert.deepStrictEqual(calls, [])
          const r = only(seen, "ToolResult")[0]!
          assert.strictEqual(r.status, "error")
          assert.match(r.output, /invalid_arguments/)
        })
      )
    })
  )

  const approvalFlow = (scope: "once" | "session") =>
    Effect.gen(function* () {
      const { tool, calls } = recordingTool("fs.write", "sensitive")
      const model = ScriptedModel.make([
        { toolCalls: [{ name: "fs.write", args: { x: 1 } }] },
        { toolCalls: [{ name: "fs.write", args: { x: 2 } }] },
        { text: "written" }
      ])
      return yield* withGateway({ model, tools: [tool] }, (gateway) =>
        Effect.gen(function* () {
          const { run, events } = yield* gateway.startRun(Caller.user("alice"), { text: "write" })
          const fiber = yield* Effect.fork(collect(events))
          let approved = 0
          const approveNext = Effect.gen(function* () {
            const pending = yield* pendingApproval(gateway, run.id)
            assert.strictEqual((yield* gateway.getRun(Caller.operator("op"), run.id)).state, "WaitingForApproval")
            // While it waits, the call has not run: only the calls approved before it have.
            assert.strictEqual(calls.length, approved)
            yield* gateway.resolveApproval(Caller.operator("bob"), {
              approvalId: pending.id,
              decision: "approve",
              scope
            })
            approved++
            return pending
          })
          const first = yield* approveNext
          assert.deepStrictEqual(calls, [])
          const approvals = [first]
          if (scope === "once") approvals.push(yield* approveNext)
          const seen = yield* Fiber.join(fiber)
          assert.deepStrictEqual(calls, [{ x: 1 }, { x: 2 }])
          assert.strictEqual(finalState(seen), "Done")
          return { seen, approvals }
        })
      )
    })

  it.effect("approval required: waits, approved once, continues; the next call asks again", () =>
    Effect.gen(function* () {
      const { seen, approvals } = yield* approvalFlow("once")
      assert.strictEqual(approvals.length, 2)
      assert.strictEqual(only(seen, "ApprovalRequested").length, 2)
      const states = only(seen, "RunStateChanged").map((e) => e.to)
      assert.deepStrictEqual(states, [
        "Accepted",
        "InProgress",
        "WaitingForApproval",
        "InProgress",
        "WaitingForApproval",
        "InProgress",
        "Done"
      ])
      assert.deepStrictEqual(
        only(seen, "ApprovalResolved").map((e) => [e.decision, e.by]),
        [
          ["approved", "bob"],
          ["approved", "bob"]
        ]
      )
    })
  )

  it.effect("approval with scope session covers later calls of that tool in the session", () =>
    Effect.gen(function* () {
      const { seen, approvals } = yield* approvalFlow("session")
      assert.strictEqual(approvals.length, 1)
      assert.strictEqual(only(seen, "ApprovalRequested").length, 1)
      const resolved = only(seen, "ApprovalResolved")
      assert.strictEqual(resolved.length, 2)
      assert.strictEqual(resolved[1]!.by, `grant:${approvals[0]!.id}`)
    })
  )

  it.effect(
    "a denied approval: the tool body never runs, the model is told, the approval cannot be resolved again",
    () =>
      Effect.gen(function* () {
        const { tool, calls } = recordingTool("fs.write", "sensitive")
        const model = ScriptedModel.make([
          { toolCalls: [{ name: "fs.write", args: { x: 1 } }] },
          { text: "ok, not writing" }
        ])
        yield* withGateway({ model, tools: [tool] }, (gateway) =>
          Effect.gen(function* () {
            const { run, events } = yield* gateway.startRun(Caller.user("alice"), { text: "write" })
            const fiber = yield* Effect.fork(collect(events))
            const pending = yield* pendingApproval(gateway, run.id)
            yield* gateway.resolveApproval(Caller.operator("bob"), {
              approvalId: pending.id,
              decision: "deny",
              reason: "no"
            })
            const seen = yield* Fiber.join(fiber)
            assert.deepStrictEqual(calls, [])
            assert.strictEqual(only(seen, "ToolResult")[0]!.status, "denied")
            assert.strictEqual(finalState(seen), "Done")
            const again = yield* gateway
              .resolveApproval(Caller.operator("mallory"), { approvalId: pending.id, decision: "approve" })
              .pipe(Effect.flip)
            assert.strictEqual(again._tag, "Conflict")
          })
        )
      })
  )

  it.effect("an approval that expires ends the call as denied (TestClock)", () =>
    Effect.gen(function* () {
      const { tool, calls } = recordingTool("fs.write", "sensitive")
      const model = ScriptedModel.make([{ toolCalls: [{ name: "fs.write", args: { x: 1 } }] }, { text: "timed out" }])
      yield* withGateway({ model, tools: [tool], approvalTimeout: "5 minutes" }, (gateway) =>
        Effect.gen(function* () {
          const { run, events } = yield* gateway.startRun(Caller.user("alice"), { text: "write" })
          const fiber = yield* Effect.fork(collect(events))
          const pending = yield* pendingApproval(gateway, run.id)
          yield* TestClock.adjust("5 minutes")
          const seen = yield* Fiber.join(fiber)
          assert.deepStrictEqual(calls, [])
          assert.strictEqual(only(seen, "ApprovalResolved")[0]!.decision, "expired")
          assert.strictEqual(only(seen, "ToolResult")[0]!.status, "denied")
          const late = yield* gateway
            .resolveApproval(Caller.operator("bob"), { approvalId: pending.id, decision: "approve" })
            .pipe(Effect.flip)
          assert.strictEqual(late._tag, "Conflict")
        })
      )
    })
  )

  it.effect("no approval channel: the call is denied at once (fail closed), the pending record stays", () =>
    Effect.gen(function* () {
      const { tool, calls } = recordingTool("fs.write", "sensitive")
      const model = ScriptedModel.make([{ toolCalls: [{ name: "fs.write", args: { x: 1 } }] }, { text: "could not" }])
      yield* withGateway({ model, tools: [tool] }, (gateway) =>
        Effect.gen(function* () {
          const { run } = yield* gateway.sendMessage(Caller.user("alice"), { text: "write" })
          const done = yield* gateway.awaitRun(Caller.operator("op"), run.id)
          assert.strictEqual(done.state, "Done")
          assert.deepStrictEqual(calls, [])
          const seen = yield* gateway.readTape(Caller.operator("op"), run.sessionId, { afterSeq: 0 })
          assert.match(only(seen, "ToolResult")[0]!.output, /no approval channel/)
          const pending = yield* gateway.listApprovals(Caller.operator("op"), { runId: run.id, status: "pending" })
          assert.strictEqual(pending.length, 1)
        })
      )
    })
  )

  it.effect("100 concurrent resolutions of one approval: exactly one wins", () =>
    Effect.gen(function* () {
      const { tool, calls } = recordingTool("fs.write", "sensitive")
      const model = ScriptedModel.make([{ toolCalls: [{ name: "fs.write", args: { x: 1 } }] }, { text: "done" }])
      yield* withGateway({ model, tools: [tool] }, (gateway) =>
        Effect.gen(function* () {
          const { run, events } = yield* gateway.startRun(Caller.user("alice"), { text: "write" })
          const fiber = yield* Effect.fork(collect(events))
          const pending = yield* pendingApproval(gateway, run.id)
          const results = yield* Effect.forEach(
            Array.from({ length: 100 }, (_, i) => i),
            (i) =>
              gateway
                .resolveApproval(Caller.operator(`u${i}`), {
                  approvalId: pending.id,
                  decision: i % 2 ? "approve" : "deny"
                })
                .pipe(Effect.either),
            { concurrency: "unbounded" }
          )
          assert.strictEqual(results.filter((r) => r._tag === "Right").length, 1)
          assert.isTrue(
            results.filter((r) => r._tag === "Left").every((r) => r._tag === "Left" && r.left._tag === "Conflict")
          )
          yield* Fiber.join(fiber)
          assert.isAtMost(calls.length, 1)
        })
      )
    })
  )

  it.effect("cancel during the model stream ends the run Cancelled within 100 ms of virtual time", () =>
    Effect.gen(function* () {
      const model = ScriptedModel.make([{ text: ["a", "b", "c", "d", "e"], delayPerDelta: "1 second" }])
      yield* withGateway({ model, coalesceChars: 1 }, (gateway) =>
        Effect.gen(function* () {
          const { run, events } = yield* gateway.startRun(Caller.user("alice"), { text: "slow" })
          const fiber = yield* Effect.fork(collect(events))
          yield* TestClock.adjust("2 seconds")
          yield* gateway.cancelRun(Caller.user("alice"), run.id)
          yield* TestClock.adjust("100 millis")
          const seen = yield* Fiber.join(fiber)
          assert.strictEqual(finalState(seen), "Cancelled")
          assert.isAtMost(only(seen, "AssistantDelta").length, 2)
          assert.strictEqual((yield* gateway.getRun(Caller.operator("op"), run.id)).state, "Cancelled")
          assert.strictEqual(gapFree(seen), undefined)
        })
      )
    })
  )

  it.effect("cancel during a slow tool interrupts the tool", () =>
    Effect.gen(function* () {
      let interrupted = false
      const slow = Tool.make("slow.op", {
        description: "sleeps",
        parameters: Schema.Struct({}),
        risk: "low",
        timeout: "1 hour",
        execute: () =>
          Effect.sleep("10 minutes").pipe(Effect.onInterrupt(() => Effect.sync(() => (interrupted = true))))
      })
      const model = ScriptedModel.make([{ toolCalls: [{ name: "slow.op" }] }, { text: "never" }])
      yield* withGateway({ model, tools: [slow] }, (gateway) =>
        Effect.gen(function* () {
          const { run, events } = yield* gateway.startRun(Caller.user("alice"), { text: "go" })
          const fiber = yield* Effect.fork(collect(events))
          yield* gateway
            .readTape(Caller.operator("op"), run.sessionId, { afterSeq: 0 })
            .pipe(Effect.repeat({ until: (l) => l.some((e) => e._tag === "ToolStarted") }))
          yield* gateway.cancelRun(Caller.user("alice"), run.id)
          const seen = yield* Fiber.join(fiber)
          assert.isTrue(interrupted)
          assert.strictEqual(finalState(seen), "Cancelled")
        })
      )
    })
  )

  it.effect("a tool that runs past its timeout becomes a tool error", () =>
    Effect.gen(function* () {
      const slow = Tool.make("slow.op", {
        description: "sleeps",
        parameters: Schema.Struct({}),
        risk: "low",
        timeout: "1 second",
        execute: () => Effect.sleep("1 minute")
      })
      const model = ScriptedModel.make([{ toolCalls: [{ name: "slow.op" }] }, { text: "it timed out" }])
      yield* withGateway({ model, tools: [slow] }, (gateway) =>
        Effect.gen(function* () {
          const { events } = yield* gateway.startRun(Caller.user("alice"), { text: "go" })
          const fiber = yield* Effect.fork(collect(events))
          yield* TestClock.adjust("2 seconds")
          const seen = yield* Fiber.join(fiber)
          assert.match(only(seen, "ToolResult")[0]!.output, /^timeout/)
          assert.strictEqual(finalState(seen), "Done")
        })
      )
    })
  )

  describe("budgets", () => {
    const loopForever = ScriptedModel.make(() => ({
      toolCalls: [{ name: "math.double", args: { x: 1 } }],
      usage: { inputTokens: 100, outputTokens: 10 }
    }))
    const failedWith = (budget: string, options: Parameters<typeof withGateway>[0]["budgets"], model = loopForever) =>
      Effect.gen(function* () {
        const { tool } = recordingTool("math.double", "low")
        return yield* withGateway({ model, tools: [tool], budgets: options }, (gateway) =>
          Effect.gen(function* () {
            const seen = yield* collect((yield* gateway.startRun(Caller.user("alice"), { text: "loop" })).events)
            assert.strictEqual(finalState(seen), "Failed")
            const err = only(seen, "RunError")[0]!
            assert.strictEqual(err.code, "budget_exceeded")
            assert.include(err.message, budget)
            return seen
          })
        )
      })

    it.effect("maxModelTurns", () =>
      Effect.gen(function* () {
        const seen = yield* failedWith(
          "maxModelTurns",
          { maxModelTurns: 3 },
          ScriptedModel.make(() => ({ toolCalls: [{ name: "math.double", args: { x: 1 } }] }))
        )
        assert.strictEqual(only(seen, "ModelRequest").length, 3)
      })
    )
    it.effect("maxToolCalls", () =>
      Effect.gen(function* () {
        const seen = yield* failedWith("maxToolCalls", { maxToolCalls: 2 })
        assert.strictEqual(only(seen, "ToolStarted").length, 2)
      })
    )
    it.effect("maxEventsPerTurn", () =>
      Effect.gen(function* () {
        const chatty = ScriptedModel.make([{ text: Array.from({ length: 2000 }, () => "word ") }])
        yield* failedWith("maxEventsPerTurn", { maxEventsPerTurn: 10 }, chatty)
      })
    )
    it.effect("maxTokensPerRun is checked before the model call that would pass it", () =>
      Effect.gen(function* () {
        const seen = yield* failedWith("maxTokensPerRun", { maxTokensPerRun: 300 })
        const used = only(seen, "Usage").reduce((n, u) => n + u.inputTokens + u.outputTokens, 0)
        assert.isAtMost(used, 300)
      })
    )
    it.effect("maxTokensPerSession spans runs", () =>
      Effect.gen(function* () {
        const { tool } = recordingTool("math.double", "low")
        const model = ScriptedModel.make(() => ({ text: "ok", usage: { inputTokens: 400, outputTokens: 100 } }))
        yield* withGateway({ model, tools: [tool], budgets: { maxTokensPerSession: 1000 } }, (gateway) =>
          Effect.gen(function* () {
            const a = yield* collect((yield* gateway.startRun(Caller.user("alice"), { key: "k", text: "one" })).events)
            const b = yield* collect((yield* gateway.startRun(Caller.user("alice"), { key: "k", text: "two" })).events)
            const c = yield* collect(
              (yield* gateway.startRun(Caller.user("alice"), { key: "k", text: "three" })).events
            )
            assert.strictEqual(finalState(a), "Done")
            assert.strictEqual(finalState(b), "Done")
            assert.strictEqual(finalState(c), "Failed")
            assert.include(only(c, "RunError")[0]!.message, "maxTokensPerSession")
            assert.strictEqual(model.prompts.length, 2)
          })
        )
      })
    )
    it.effect("wallClock", () =>
      Effect.gen(function* () {
        const model = ScriptedModel.make([{ text: ["a", "b", "c"], delayPerDelta: "1 minute" }])
        yield* withGateway({ model, budgets: { wallClock: "90 seconds" } }, (gateway) =>
          Effect.gen(function* () {
            const fiber = yield* Effect.fork(
              collect((yield* gateway.startRun(Caller.user("alice"), { text: "x" })).events)
            )
            yield* TestClock.adjust("2 minutes")
            const seen = yield* Fiber.join(fiber)
            assert.strictEqual(finalState(seen), "Failed")
            assert.include(only(seen, "RunError")[0]!.message, "wallClock")
          })
        )
      })
    )
  })

  it.effect("a provider error fails the run with a typed code on the tape", () =>
    Effect.gen(function* () {
      const model = ScriptedModel.make([{ fail: { reason: "auth", message: "bad key" } }])
      yield* withGateway({ model }, (gateway) =>
        Effect.gen(function* () {
          const seen = yield* collect((yield* gateway.startRun(Caller.user("alice"), { text: "x" })).events)
          assert.strictEqual(finalState(seen), "Failed")
          assert.strictEqual(only(seen, "RunError")[0]!.code, "provider_error")
        })
      )
    })
  )

  it.effect("one run at a time per session: later messages queue in order", () =>
    Effect.gen(function* () {
      const model = ScriptedModel.make((req) => ({
        text: [`re:${(req.messages.at(-1) as { text: string }).text}`],
        delayPerDelta: "1 second"
      }))
      yield* withGateway({ model }, (gateway) =>
        Effect.gen(function* () {
          const a = yield* gateway.sendMessage(Caller.user("alice"), { key: "chat", text: "one" })
          const b = yield* gateway.sendMessage(Caller.user("alice"), { key: "chat", text: "two" })
          const c = yield* gateway.sendMessage(Caller.user("alice"), { key: "chat", text: "three" })
          assert.strictEqual(a.session.id, b.session.id)
          yield* TestClock.adjust("10 seconds")
          yield* gateway.awaitRun(Caller.operator("op"), c.run.id)
          const tape = yield* gateway.readTape(Caller.operator("op"), a.session.id, { afterSeq: 0 })
          assert.strictEqual(gapFree(tape), undefined)
          const accepted = only(tape, "RunAccepted")
          assert.deepStrictEqual(
            accepted.map((e) => e.queuedBehind),
            [null, a.run.id, b.run.id]
          )
          // Runs never interleave: each run's events are contiguous after its start.
          const started = only(tape, "UserMessage").map((e) => e.runId)
          assert.deepStrictEqual(started, [a.run.id, b.run.id, c.run.id])
          const answers = only(tape, "AssistantMessage").map((e) => e.text)
          assert.deepStrictEqual(answers, ["re:one", "re:two", "re:three"])
          // The third prompt saw the first two exchanges, in order.
          assert.deepStrictEqual(
            model.prompts[2]!.messages.map((m) => m.role),
            ["user", "assistant", "user", "assistant", "user"]
          )
        })
      )
    })
  )

  it.effect("a queued run can be cancelled before it starts", () =>
    Effect.gen(function* () {
      const model = ScriptedModel.make(() => ({ text: ["x"], delayPerDelta: "1 second" }))
      yield* withGateway({ model }, (gateway) =>
        Effect.gen(function* () {
          const a = yield* gateway.sendMessage(Caller.user("alice"), { key: "chat", text: "one" })
          const b = yield* gateway.sendMessage(Caller.user("alice"), { key: "chat", text: "two" })
          const cancelled = yield* gateway.cancelRun(Caller.user("alice"), b.run.id)
          assert.strictEqual(cancelled.state, "Cancelled")
          yield* TestClock.adjust("5 seconds")
          assert.strictEqual((yield* gateway.awaitRun(Caller.operator("op"), a.run.id)).state, "Done")
          assert.strictEqual(model.prompts.length, 1)
        })
      )
    })
  )

  it.effect("sessions are bound to their principal", () =>
    Effect.gen(function* () {
      const model = ScriptedModel.make(() => ({ text: "ok" }))
      yield* withGateway({ model }, (gateway) =>
        Effect.gen(function* () {
          const s = yield* gateway.resolveSession(Caller.user("alice"), { key: "k" })
          const again = yield* gateway.resolveSession(Caller.user("alice"), { key: "k" })
          assert.strictEqual(again.id, s.id)
          const other = yield* gateway.resolveSession(Caller.user("bob"), { key: "k" })
          assert.notStrictEqual(other.id, s.id)
          const refused = yield* gateway
            .startRun(Caller.user("mallory"), { sessionId: s.id, text: "hi" })
            .pipe(Effect.flip)
          // Another principal's session answers exactly like one that does not exist.
          assert.strictEqual(refused._tag, "NotFound")
          const empty = yield* gateway.startRun(Caller.user("alice"), { text: "" }).pipe(Effect.flip)
          assert.strictEqual(empty._tag, "InvalidArgument")
        })
      )
    })
  )

  it.effect("reset starts a fresh history; branch inherits the parent's history up to a seq", () =>
    Effect.gen(function* () {
      const model = ScriptedModel.make((req) => ({ text: `seen ${req.messages.length}` }))
      yield* withGateway({ model }, (gateway) =>
        Effect.gen(function* () {
          const first = yield* gateway.startRun(Caller.user("alice"), { key: "k", text: "one" })
          yield* collect(first.events)
          const branch = yield* gateway.branchSession(Caller.user("alice"), first.session.id)
          yield* collect((yield* gateway.startRun(Caller.user("alice"), { sessionId: branch.id, text: "b" })).events)
          assert.deepStrictEqual(
            model.prompts[1]!.messages.map((m) => m.role),
            ["user", "assistant", "user"]
          )
          yield* gateway.resetSession(Caller.user("alice"), first.session.id)
          yield* collect((yield* gateway.startRun(Caller.user("alice"), { key: "k", text: "two" })).events)
          assert.deepStrictEqual(model.prompts[2]!.messages, [{ role: "user", text: "two" }])
          const archived = yield* gateway.archiveSession(Caller.user("alice"), branch.id)
          assert.isTrue(archived.archived)
        })
      )
    })
  )

  it.effect("50 concurrent runs on separate sessions keep gap-free tapes", () =>
    Effect.gen(function* () {
      const { tool } = recordingTool("math.double", "low")
      const model = ScriptedModel.make((req) =>
        req.messages.at(-1)?.role === "tool"
          ? { text: ["do", "ne"] }
          : { toolCalls: [{ name: "math.double", args: { x: 2 } }] }
      )
      yield* withGateway({ model, tools: [tool], coalesceChars: 1 }, (gateway, journal) =>
        Effect.gen(function* () {
          const runs = yield* Effect.forEach(
            Array.from({ length: 50 }, (_, i) => i),
            (i) =>
              Effect.flatMap(gateway.startRun(Caller.user(`p${i}`), { text: `go ${i}` }), (r) => collect(r.events)),
            { concurrency: "unbounded" }
          )
          for (const seen of runs) {
            assert.strictEqual(finalState(seen), "Done")
            assert.strictEqual(gapFree(seen), undefined)
            const stored = yield* journal.readTape(seen[0]!.sessionId, { afterSeq: 0 })
            assert.deepStrictEqual(stored, seen)
          }
          const verify = yield* journal.verify
          assert.isTrue(verify.ok)
        })
      )
    })
  )

  it.effect("subscribe after a seq: replay from the journal, then live, no gap or duplicate at the seam", () =>
    Effect.gen(function* () {
      const gate = yield* Deferred.make<void>()
      const model = ScriptedModel.make([
        { text: ["first ", "answer"] },
        { text: ["second ", "answer ", "streams ", "live"], delayPerDelta: "1 second" }
      ])
      yield* withGateway({ model, coalesceChars: 1 }, (gateway) =>
        Effect.gen(function* () {
          const one = yield* gateway.startRun(Caller.user("alice"), { key: "k", text: "one" })
          const firstRun = yield* collect(one.events)
          const afterSeq = firstRun[3]!.tapeSeq
          const sub = yield* Effect.fork(
            gateway.subscribe(Caller.operator("op"), one.session.id, afterSeq).pipe(
              Stream.tap((e) =>
                e._tag === "RunAccepted" && e.runId !== one.run.id ? Deferred.succeed(gate, undefined) : Effect.void
              ),
              Stream.takeUntil((e) => e.runId !== one.run.id && TapeEvent.isRunEnd(e)),
              Stream.runCollect
            )
          )
          const two = yield* gateway.sendMessage(Caller.user("alice"), { key: "k", text: "two" })
          yield* Deferred.await(gate)
          yield* TestClock.adjust("10 seconds")
          const got = Chunk.toReadonlyArray(yield* Fiber.join(sub))
          assert.strictEqual(gapFree(got, afterSeq + 1), undefined)
          const all = yield* gateway.readTape(Caller.operator("op"), one.session.id, { afterSeq })
          assert.deepStrictEqual(got, all)
          assert.isTrue(got.some((e) => e.runId === two.run.id && e._tag === "AssistantDelta"))
        })
      )
    })
  )

  it.effect("a run waiting for approval is resumed by a brand-new Gateway over the same journal", () =>
    Effect.gen(function* () {
      const journal = yield* MemoryJournal.make()
      const journalLayer = Layer.succeed(Journal.Journal, journal)
      const { tool, calls } = recordingTool("fs.write", "sensitive")
      const script = [{ toolCalls: [{ name: "fs.write", args: { x: 7 } }] }, { text: "written after restart" }]
      // First process: start, wait for approval, then stop (scope closes: the run is parked).
      const first = ScriptedModel.make(script)
      const { runId, sessionId } = yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const { run, events } = yield* gateway.startRun(Caller.user("alice"), { text: "write" })
        yield* Effect.fork(collect(events))
        yield* pendingApproval(gateway, run.id)
        return { runId: run.id, sessionId: run.sessionId }
      }).pipe(Effect.provide(gatewayLayer({ model: first, tools: [tool], journal: journalLayer })), Effect.scoped)
      assert.strictEqual(Option.getOrThrow(yield* journal.getRun(runId)).state, "WaitingForApproval")
      assert.deepStrictEqual(calls, [])
      // Second process: a new Gateway resumes waiting; approving continues the same run.
      const second = ScriptedModel.make(script.slice(1))
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const [pending] = yield* gateway.listApprovals(Caller.operator("op"), { runId, status: "pending" })
        const events = yield* Effect.fork(
          collect(gateway.subscribe(Caller.operator("op"), sessionId, 0).pipe(Stream.takeUntil(TapeEvent.isRunEnd)))
        )
        yield* gateway.resolveApproval(Caller.operator("bob"), { approvalId: pending!.id, decision: "approve" })
        const run = yield* gateway.awaitRun(Caller.operator("op"), runId)
        assert.strictEqual(run.state, "Done")
        const seen = yield* Fiber.join(events)
        assert.strictEqual(gapFree(seen), undefined)
        assert.strictEqual(only(seen, "AssistantMessage").at(-1)!.text, "written after restart")
      }).pipe(Effect.provide(gatewayLayer({ model: second, tools: [tool], journal: journalLayer })), Effect.scoped)
      assert.deepStrictEqual(calls, [{ x: 7 }])
      // The resumed run's model call saw the approved tool result.
      assert.strictEqual(second.prompts[0]!.messages.at(-1)!.role, "tool")
    })
  )
})
