import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, FastCheck as fc, Layer, Stream, TestClock } from "effect"
import { noteTool } from "../src/adapters/tools/BuiltinTools.js"
import { Compactor, ContextEngine, ModelLimits, Tokenizer } from "../src/context.js"
import {
  Caller,
  Gateway,
  Ids,
  Journal,
  MemoryJournal,
  PromptAssembler,
  Records,
  ScriptedModel,
  type TapeEvent,
  type Tool
} from "../src/index.js"
import { buildMessages } from "../src/kernel/internal/history.js"
import { collect, gatewayLayer } from "../src/testing.js"
import { recordingTool } from "./helpers.js"

type Ev = TapeEvent.TapeEvent
type Request = Parameters<ScriptedModel.ScriptedModel["stream"]>[0]
const only = <T extends Ev["_tag"]>(events: ReadonlyArray<Ev>, tag: T) =>
  events.filter((e): e is TapeEvent.TapeEventOf<T> => e._tag === tag)

const alice = Caller.user("alice")
const WINDOW = 4_000
const RESERVE = 500
const USABLE = WINDOW - RESERVE

const isCompaction = (r: Request) => r.instructions?.startsWith(Compactor.COMPACTION_MARKER) === true
const mustKeepOf = (r: Request): Array<string> => {
  const first = r.messages[0]
  const text = first?.role === "user" ? first.text : ""
  const block = /<must-keep>\n([\s\S]*?)<\/must-keep>/.exec(text)?.[1] ?? ""
  return block.split("\n").filter((l) => l.length > 0)
}
/** What a diligent model writes: every section, every must-keep fact. */
const goodSummary = (r: Request) =>
  [
    "## Goal",
    "Track the user's orders.",
    "## Decisions",
    "- Orders are recorded as they come.",
    "## Facts & identifiers",
    ...mustKeepOf(r),
    "## Files",
    "- (in the facts)",
    "## Open work",
    "- none"
  ].join("\n")
/** What a careless model writes: the sections, but none of the facts. */
const sloppySummary =
  "## Goal\nOrders.\n## Decisions\n- some\n## Facts & identifiers\n- many\n## Files\n- some\n## Open work\n- none"

const hex = (n: number) => (0x9f86d081 + n * 7919).toString(16)

/** A scripted model that answers turns (every 5th with a tool call) and writes summaries. */
const sessionModel = (summary: (r: Request) => ScriptedModel.ScriptedTurn) =>
  ScriptedModel.make((request) => {
    if (isCompaction(request)) return summary(request)
    const last = request.messages.at(-1)
    if (last?.role === "user") {
      const n = Number(/turn (\d+)/.exec(last.text)?.[1] ?? 0)
      if (n % 5 === 0) return { toolCalls: [{ name: "math.double", args: { x: n } }] }
      return { text: `Noted turn ${n}: order ${hex(n)} is stored at src/orders/${n}.json with ${n * 7} units.` }
    }
    return { text: `The tool said ${last?.role === "tool" ? last.output : "nothing"}.` }
  })

interface Harness {
  readonly gateway: Gateway.Service
  readonly journal: Journal.Service
  readonly engine: ContextEngine.ContextEngine
}

/** The real Gateway with the context engine as its prompt assembler, over one in-memory journal. */
const withEngine = <A, E>(
  model: ScriptedModel.ScriptedModel,
  options: ContextEngine.Options,
  tools: ReadonlyArray<Tool.AnyTool>,
  body: (h: Harness) => Effect.Effect<A, E>
) =>
  Effect.gen(function* () {
    const journal = yield* MemoryJournal.make()
    const engine = yield* ContextEngine.make({
      journal,
      model,
      encoding: "o200k_base",
      contextWindow: WINDOW,
      outputReserve: RESERVE,
      minInputTokens: 200,
      ...options
    })
    const layer = gatewayLayer({
      model,
      tools,
      journal: Layer.succeed(Journal.Journal, journal),
      promptAssembler: Layer.succeed(PromptAssembler.PromptAssembler, engine.assembler),
      budgets: { maxModelTurns: 10 }
    }) as Layer.Layer<Gateway.Gateway>
    return yield* Effect.flatMap(Gateway.Gateway, (gateway) => body({ gateway, journal, engine })).pipe(
      Effect.provide(layer),
      Effect.scoped
    )
  })

const turn = (gateway: Gateway.Service, text: string, key = "long") =>
  Effect.gen(function* () {
    const { run, events } = yield* gateway.startRun(alice, { key, text })
    const seen = yield* collect(events)
    assert.strictEqual(only(seen, "RunStateChanged").at(-1)?.to, "Done", `run for "${text}" ended Done`)
    return run
  })

const assembleNow = (h: Harness, sessionId: Ids.SessionId, runId: Ids.RunId) =>
  Effect.gen(function* () {
    const session = yield* Journal.requireSession(h.journal, sessionId)
    const history = yield* h.journal.readTape(sessionId, { afterSeq: session.historyFromSeq })
    return yield* h.engine.assembler.assemble({ session, runId, history, instructions: undefined, tools: [] })
  })

describe("ContextEngine", () => {
  it.effect(
    "a 500-turn session stays under the window on every model call, compacting as it goes",
    () =>
      Effect.gen(function* () {
        const { tool } = recordingTool("math.double", "low")
        const model = sessionModel((r) => ({ text: goodSummary(r) }))
        yield* withEngine(model, {}, [tool], (h) =>
          Effect.gen(function* () {
            let last: Ids.RunId | undefined
            for (let i = 1; i <= 500; i++) {
              last = (yield* turn(h.gateway, `turn ${i}: remember ${hex(i)} and ${i * 13} for docs/t${i}.md`)).id
            }
            const run = yield* h.gateway.getRun(alice, last!)
            const tape = yield* h.journal.readTape(run.sessionId, { afterSeq: 0 })
            const requests = only(tape, "ModelRequest")
            const turns = model.prompts.filter((p) => !isCompaction(p))
            assert.strictEqual(turns.length, requests.length)
            assert.isAtLeast(turns.length, 600) // 500 answers + 100 tool follow-ups
            let highest = 0
            for (const [i, prompt] of model.prompts.entries()) {
              const tokens = yield* h.engine.countRequest(prompt)
              assert.isAtMost(tokens, USABLE, `prompt ${i} has ${tokens} tokens, over the usable window`)
              highest = Math.max(highest, tokens)
            }
            // The window was under real pressure, not trivially respected.
            assert.isAbove(highest, 0.75 * USABLE)
            // The assembler's incremental counts are the real counts of what the model got.
            for (const [i, prompt] of turns.entries()) {
              assert.strictEqual(requests[i]!.estimatedTokens, yield* h.engine.countRequest(prompt))
            }
            const compactions = only(tape, "CompactionApplied")
            assert.isAtLeast(compactions.length, 10)
            for (const c of compactions) {
              assert.strictEqual(c.summarizer, "model")
              assert.strictEqual(c.strategy, "session_window_v1")
              assert.isBelow(c.tokensAfter, c.tokensBefore)
              assert.isAtMost(c.fromSeq, c.toSeq)
            }
            // The last prompt still ends with the last user turn and starts with the latest summary.
            const final = turns.at(-1)!
            const summary = final.messages[0]!
            assert.isTrue(summary.role === "system" && summary.text.includes(compactions.at(-1)!.summary))
            assert.isTrue(final.messages.some((m) => m.role === "user" && m.text.startsWith("turn 500:")))
            assert.strictEqual((yield* h.engine.compactor.listCheckpoints(run.sessionId)).length, compactions.length)
          })
        )
      }),
    60_000
  )

  it.effect("a model summary that loses facts is refused: the extractive summary keeps them", () =>
    Effect.gen(function* () {
      const { tool } = recordingTool("math.double", "low")
      const model = sessionModel(() => ({ text: sloppySummary }))
      yield* withEngine(model, { autoCompact: false, keepTurns: 1 }, [tool], (h) =>
        Effect.gen(function* () {
          for (let i = 1; i <= 6; i++)
            yield* turn(h.gateway, `turn ${i}: remember ${hex(i)} and ${i * 13} for docs/t${i}.md`)
          const session = (yield* h.journal.listSessions({}))[0]!
          const result = yield* h.engine.compactor.compact(session.id)
          assert.isTrue(result.applied)
          assert.strictEqual(result.summarizer, "extractive")
          assert.match(result.rejected ?? "", /lost \d+ fact/)
          assert.isTrue(model.prompts.some(isCompaction), "the model was asked first")
          // Facts of the covered turns survive, word for word.
          for (const fact of [hex(1), "13", "docs/t1.md", hex(3), "src/orders/3.json", "21", hex(5), "65"]) {
            assert.include(result.summary, fact)
          }
          for (const s of ["## Goal", "## Decisions", "## Facts & identifiers", "## Files", "## Open work"]) {
            assert.include(result.summary, s)
          }
          const [event] = only(yield* h.journal.readTape(session.id, { afterSeq: 0 }), "CompactionApplied")
          assert.strictEqual(event!.summarizer, "extractive")
          assert.strictEqual(event!.checkpointId, result.checkpointId)
          assert.strictEqual(event!.summary, result.summary)
        })
      )
    })
  )

  it.effect("a failing model also falls back to the extractive summary", () =>
    Effect.gen(function* () {
      const { tool } = recordingTool("math.double", "low")
      const model = sessionModel(() => ({ fail: { reason: "overloaded", message: "model down" } }))
      yield* withEngine(model, { autoCompact: false, keepTurns: 1 }, [tool], (h) =>
        Effect.gen(function* () {
          for (let i = 1; i <= 4; i++) yield* turn(h.gateway, `turn ${i}: remember ${hex(i)}`)
          const session = (yield* h.journal.listSessions({}))[0]!
          const preview = yield* h.engine.compactor.compact(session.id, { preview: true })
          assert.isFalse(preview.applied)
          assert.strictEqual(preview.checkpointId, undefined)
          assert.strictEqual(
            only(yield* h.journal.readTape(session.id, { afterSeq: 0 }), "CompactionApplied").length,
            0
          )
          const result = yield* h.engine.compactor.compact(session.id)
          assert.strictEqual(result.summarizer, "extractive")
          assert.match(result.rejected ?? "", /model down/)
          assert.include(result.summary, hex(1))
        })
      )
    })
  )

  it.effect("a model that does not answer in time also falls back (TestClock)", () =>
    Effect.gen(function* () {
      const { tool } = recordingTool("math.double", "low")
      const model = sessionModel(() => ({ text: ["## Goal"], delayPerDelta: "10 minutes" }))
      yield* withEngine(model, { autoCompact: false, keepTurns: 1, summaryTimeout: "5 seconds" }, [tool], (h) =>
        Effect.gen(function* () {
          for (let i = 1; i <= 3; i++) yield* turn(h.gateway, `turn ${i}: remember ${hex(i)}`)
          const session = (yield* h.journal.listSessions({}))[0]!
          const fiber = yield* Effect.fork(h.engine.compactor.compact(session.id))
          yield* TestClock.adjust("5 seconds")
          const result = yield* Fiber.join(fiber)
          assert.strictEqual(result.summarizer, "extractive")
          assert.match(result.rejected ?? "", /timed out/)
        })
      )
    })
  )

  it.effect("restoring a checkpoint gives back the exact pre-compaction prompt; the tape only grows", () =>
    Effect.gen(function* () {
      const { tool } = recordingTool("math.double", "low")
      const model = ScriptedModel.make((request) => {
        if (isCompaction(request)) return { text: goodSummary(request) }
        const last = request.messages.at(-1)
        if (last?.role === "user" && last.text.includes("note")) {
          return { toolCalls: [{ name: "session.note", args: { text: "The customer id is CUST-4711; never email." } }] }
        }
        if (last?.role === "user" && last.text.includes("double"))
          return { toolCalls: [{ name: "math.double", args: { x: 21 } }] }
        return { text: `ok: ${last?.role === "tool" ? last.output : "noted"}` }
      })
      yield* withEngine(model, { autoCompact: false, keepTurns: 1 }, [tool, noteTool], (h) =>
        Effect.gen(function* () {
          yield* turn(h.gateway, "please take a note")
          yield* turn(h.gateway, "double 21 for me")
          yield* turn(h.gateway, "what is in src/app/main.ts?")
          const run = yield* turn(h.gateway, "and the last question")
          const sessionId = run.sessionId
          const before = yield* h.journal.readTape(sessionId, { afterSeq: 0 })
          const p0 = yield* assembleNow(h, sessionId, run.id)

          const compaction = yield* h.engine.compactor.compact(sessionId)
          const p1 = yield* assembleNow(h, sessionId, run.id)
          assert.isBelow(p1.request.messages.length, p0.request.messages.length)
          assert.isBelow(p1.estimatedTokens, p0.estimatedTokens)
          assert.strictEqual(p1.estimatedTokens, compaction.tokensAfter)
          assert.strictEqual(p0.estimatedTokens, compaction.tokensBefore)
          const summary = p1.request.messages[0]!
          // The pinned note is kept verbatim.
          assert.isTrue(
            summary.role === "system" && summary.text.includes("The customer id is CUST-4711; never email.")
          )
          // The last turn is kept verbatim after the summary.
          assert.deepStrictEqual(p1.request.messages.slice(1), p0.request.messages.slice(-2))

          const [checkpoint] = yield* h.engine.compactor.listCheckpoints(sessionId)
          assert.strictEqual(checkpoint!.id, compaction.checkpointId)
          assert.strictEqual(checkpoint!.restoredSeq, before.at(-1)!.tapeSeq)
          assert.strictEqual(checkpoint!.pinnedNotes, 1)

          const restored = yield* h.engine.compactor.restore(sessionId, checkpoint!.id, { by: "alice" })
          assert.strictEqual(restored.event._tag, "CheckpointRestored")
          assert.strictEqual(restored.event.restoredSeq, checkpoint!.restoredSeq)
          const p2 = yield* assembleNow(h, sessionId, run.id)
          assert.strictEqual(JSON.stringify(p2.request.messages), JSON.stringify(p0.request.messages))
          assert.strictEqual(p2.estimatedTokens, p0.estimatedTokens)

          // A fresh engine (nothing cached) over the same journal agrees: the view is rebuilt from the tape.
          const fresh = yield* ContextEngine.make({
            journal: h.journal,
            model,
            encoding: "o200k_base",
            autoCompact: false
          })
          const session = yield* Journal.requireSession(h.journal, sessionId)
          const p3 = yield* fresh.assembler.assemble({
            session,
            runId: run.id,
            history: yield* h.journal.readTape(sessionId, { afterSeq: session.historyFromSeq }),
            instructions: undefined,
            tools: []
          })
          assert.strictEqual(JSON.stringify(p3.request.messages), JSON.stringify(p0.request.messages))

          // Nothing was deleted or rewritten: the tape only grew by the compaction and the restore.
          const after = yield* h.journal.readTape(sessionId, { afterSeq: 0 })
          assert.deepStrictEqual(after.slice(0, before.length), before)
          assert.deepStrictEqual(
            after.slice(before.length).map((e) => e._tag),
            ["CompactionApplied", "CheckpointRestored"]
          )

          // The next run's prompt continues from the restored one.
          yield* turn(h.gateway, "after the restore")
          const next = model.prompts.at(-1)!
          assert.strictEqual(
            JSON.stringify(next.messages.slice(0, p0.request.messages.length)),
            JSON.stringify(p0.request.messages)
          )

          // Ids are parsed; other sessions' checkpoints do not exist for this one.
          const bad = yield* Effect.flip(h.engine.compactor.restore(sessionId, "../../etc/passwd"))
          assert.strictEqual(bad._tag, "InvalidArgument")
          const other = yield* h.gateway.resolveSession(alice, { key: "other" })
          const foreign = yield* Effect.flip(h.engine.compactor.restore(other.id, checkpoint!.id))
          assert.strictEqual(foreign._tag, "NotFound")
        })
      )
    })
  )

  it.effect("compaction refuses while an approval is pending, and proceeds once it is resolved", () =>
    Effect.gen(function* () {
      const { tool: write, calls } = recordingTool("fs.write", "sensitive")
      const model = ScriptedModel.make((request) => {
        if (isCompaction(request)) return { text: goodSummary(request) }
        const last = request.messages.at(-1)
        if (last?.role === "user" && last.text.includes("write"))
          return { toolCalls: [{ name: "fs.write", args: { x: 7 } }] }
        return { text: `done: ${last?.role === "tool" ? last.output : "ok"}` }
      })
      yield* withEngine(model, { autoCompact: false, keepTurns: 1 }, [write], (h) =>
        Effect.gen(function* () {
          for (let i = 1; i <= 3; i++) yield* turn(h.gateway, `turn ${i}: remember ${hex(i)}`)
          const { run, events } = yield* h.gateway.startRun(alice, { key: "long", text: "write it down" })
          const head = yield* events.pipe(
            Stream.takeUntil((e) => e._tag === "ApprovalRequested"),
            Stream.runCollect
          )
          const requested = [...head].at(-1)
          assert.strictEqual(requested?._tag, "ApprovalRequested")
          const refused = yield* Effect.flip(h.engine.compactor.compact(run.sessionId))
          assert.strictEqual(refused._tag, "Conflict")
          assert.match(refused.message, /approval/)
          assert.strictEqual(
            only(yield* h.journal.readTape(run.sessionId, { afterSeq: 0 }), "CompactionApplied").length,
            0
          )
          // A restore is refused too while the run has not ended.
          if (requested?._tag === "ApprovalRequested") {
            yield* h.gateway.resolveApproval(alice, { approvalId: requested.approvalId, decision: "approve" })
          }
          const done = yield* h.gateway.awaitRun(alice, run.id)
          assert.strictEqual(done.state, "Done")
          assert.deepStrictEqual(calls, [{ x: 7 }])
          const result = yield* h.engine.compactor.compact(run.sessionId)
          assert.isTrue(result.applied)
        })
      )
    })
  )

  it.effect("restore refuses while the session has a run that has not ended", () =>
    Effect.gen(function* () {
      const { tool: write } = recordingTool("fs.write", "sensitive")
      const model = ScriptedModel.make((request) => {
        if (isCompaction(request)) return { text: goodSummary(request) }
        const last = request.messages.at(-1)
        if (last?.role === "user" && last.text.includes("write"))
          return { toolCalls: [{ name: "fs.write", args: { x: 1 } }] }
        return { text: "ok" }
      })
      yield* withEngine(model, { autoCompact: false, keepTurns: 1 }, [write], (h) =>
        Effect.gen(function* () {
          for (let i = 1; i <= 3; i++) yield* turn(h.gateway, `turn ${i}: remember ${hex(i)}`)
          const session = (yield* h.journal.listSessions({}))[0]!
          const compaction = yield* h.engine.compactor.compact(session.id)
          const { run, events } = yield* h.gateway.startRun(alice, { key: "long", text: "write it" })
          yield* events.pipe(
            Stream.takeUntil((e) => e._tag === "ApprovalRequested"),
            Stream.runDrain
          )
          const refused = yield* Effect.flip(h.engine.compactor.restore(session.id, compaction.checkpointId!))
          assert.strictEqual(refused._tag, "Conflict")
          yield* h.gateway.cancelRun(alice, run.id)
          const restored = yield* h.engine.compactor.restore(session.id, compaction.checkpointId!)
          assert.strictEqual(restored.event.checkpointId, compaction.checkpointId)
        })
      )
    })
  )
})

// ---- random tapes ----------------------------------------------------------------------------

type Op =
  | { readonly t: "user" }
  | { readonly t: "assistant"; readonly calls: number }
  | { readonly t: "result"; readonly pick: number; readonly status: "ok" | "error" }
  | { readonly t: "ask"; readonly pick: number }
  | { readonly t: "answer"; readonly pick: number }
  | { readonly t: "note" }
  | { readonly t: "noise" }

const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 3, arbitrary: fc.constant({ t: "user" as const }) },
  { weight: 3, arbitrary: fc.integer({ min: 0, max: 3 }).map((calls) => ({ t: "assistant" as const, calls })) },
  {
    weight: 4,
    arbitrary: fc.record({
      t: fc.constant("result" as const),
      pick: fc.nat(),
      status: fc.constantFrom("ok" as const, "error" as const)
    })
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("ask" as const), pick: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("answer" as const), pick: fc.nat() }) },
  { weight: 1, arbitrary: fc.constant({ t: "note" as const }) },
  { weight: 1, arbitrary: fc.constant({ t: "noise" as const }) }
)

/** Events of a random tape (results may come late, after later turns, or never). */
const tapeOf = (sessionId: Ids.SessionId, ops: ReadonlyArray<Op>): Array<TapeEvent.NewTapeEvent> => {
  const out: Array<TapeEvent.NewTapeEvent> = []
  const base = { sessionId, runId: null, at: 1 }
  const pending: Array<{ id: Ids.ToolCallId; asked: Ids.ApprovalId | undefined }> = []
  let n = 0
  const id = () =>
    Ids.encodeUlid(
      1_700_000_000_000,
      Array.from({ length: 16 }, (_, i) => (++n >> (i % 8)) & 31)
    )
  for (const op of ops) {
    switch (op.t) {
      case "user":
        out.push({ _tag: "UserMessage", ...base, text: `user asks about f${n}.ts and ${hex(n)}` })
        break
      case "assistant": {
        out.push({ _tag: "AssistantMessage", ...base, turn: 1, text: `answer ${n}`, finishReason: "stop" })
        for (let k = 0; k < op.calls; k++) {
          const call = id() as Ids.ToolCallId
          pending.push({ id: call, asked: undefined })
          out.push({
            _tag: "ToolProposed",
            ...base,
            toolCallId: call,
            providerCallId: `p${n}`,
            tool: "math.double",
            args: { x: n },
            argsDigest: "d".repeat(64)
          })
        }
        break
      }
      case "result": {
        const [call] = pending.splice(op.pick % Math.max(1, pending.length), 1)
        if (call === undefined) break
        out.push({
          _tag: "ToolResult",
          ...base,
          toolCallId: call.id,
          tool: "math.double",
          status: op.status,
          output: `{"doubled":${n * 2}}`,
          truncated: false,
          durationMs: 1
        })
        break
      }
      case "ask": {
        const call = pending[op.pick % Math.max(1, pending.length)]
        if (call === undefined || call.asked !== undefined) break
        call.asked = id() as Ids.ApprovalId
        out.push({
          _tag: "ApprovalRequested",
          ...base,
          approvalId: call.asked,
          toolCallId: call.id,
          tool: "math.double",
          risk: "sensitive",
          argsDigest: "d".repeat(64),
          summary: "double",
          expiresAt: 2
        })
        break
      }
      case "answer": {
        const call = pending.find((c) => c.asked !== undefined)
        if (call === undefined || call.asked === undefined) break
        out.push({
          _tag: "ApprovalResolved",
          ...base,
          approvalId: call.asked,
          toolCallId: call.id,
          decision: "approved",
          scope: "once",
          by: "op",
          reason: "ok"
        })
        call.asked = undefined
        break
      }
      case "note":
        out.push({ _tag: "SessionNote", ...base, author: "tool:session.note", text: `pinned fact ${n}` })
        break
      case "noise":
        out.push({ _tag: "RunStateChanged", ...base, from: "InProgress", to: "InProgress", reason: "noise" })
        break
    }
  }
  return out
}

describe("ContextEngine on random tapes", () => {
  it.effect.prop(
    "never cuts between a tool call and its result, keeps open work, and refuses while an approval is open",
    [
      fc.array(opArb, { minLength: 1, maxLength: 80 }),
      fc.integer({ min: 0, max: 4 }),
      fc.integer({ min: 300, max: 3_000 })
    ],
    ([ops, keepTurns, window]) =>
      Effect.gen(function* () {
        const journal = yield* MemoryJournal.make()
        const session = Records.makeSession({ id: (yield* Ids.makeSessionId) as Ids.SessionId, principal: "p" })
        yield* journal.createSession(session)
        const events = tapeOf(session.id, ops)
        for (const e of events) yield* journal.append(session.id, [e])
        const tape = yield* journal.readTape(session.id, { afterSeq: 0 })
        const model = ScriptedModel.make((r) => ({ text: goodSummary(r) }))
        const engine = yield* ContextEngine.make({
          journal,
          model,
          contextWindow: window,
          outputReserve: 100,
          keepTurns,
          autoCompact: false
        })
        // Without a compaction, the prompt is exactly the kernel's default rebuild of the tape.
        const plain = yield* engine.assembler.assemble({
          session,
          runId: (yield* Ids.makeRunId) as Ids.RunId,
          history: tape,
          instructions: undefined,
          tools: []
        })
        assert.deepStrictEqual(plain.request.messages, buildMessages(tape))

        const outcome = yield* Effect.either(engine.compactor.compact(session.id))
        const proposed = new Map(only(tape, "ToolProposed").map((e) => [e.toolCallId, e.tapeSeq]))
        const results = new Map(only(tape, "ToolResult").map((e) => [e.toolCallId, e.tapeSeq]))
        const answered = new Set([...only(tape, "ApprovalResolved").map((e) => e.toolCallId), ...results.keys()])
        const openApproval = only(tape, "ApprovalRequested").some((e) => !answered.has(e.toolCallId))
        if (outcome._tag === "Left") {
          assert.strictEqual(outcome.left._tag, "Conflict")
          return
        }
        assert.isFalse(openApproval, "compacted while an approval was open")
        const { toSeq } = outcome.right
        for (const [call, at] of proposed) {
          const result = results.get(call)
          if (result === undefined) assert.isAbove(at, toSeq, "a call without a result (open work) was covered")
          else assert.strictEqual(at <= toSeq, result <= toSeq, "a tool call and its result were split")
        }
        // The compacted prompt pairs every call with its own result right after it.
        const after = yield* engine.assembler.assemble({
          session,
          runId: (yield* Ids.makeRunId) as Ids.RunId,
          history: yield* journal.readTape(session.id, { afterSeq: 0 }),
          instructions: undefined,
          tools: []
        })
        const messages = after.request.messages
        assert.strictEqual(messages[0]?.role, "system")
        for (let i = 0; i < messages.length; i++) {
          const m = messages[i]!
          if (m.role !== "assistant") continue
          m.toolCalls.forEach((c, k) => {
            const r = messages[i + 1 + k]
            assert.isTrue(r?.role === "tool" && r.toolCallId === c.id)
          })
        }
        const kept = new Set(messages.flatMap((m) => (m.role === "tool" ? [m.toolCallId] : [])))
        for (const call of kept) assert.isAbove(proposed.get(call as Ids.ToolCallId)!, toSeq)
      }),
    { fastCheck: { numRuns: 150 } }
  )
})

describe("Tokenizer and model limits", () => {
  it.effect("counts OpenAI encodings exactly, others by the documented approximation", () =>
    Effect.gen(function* () {
      const o200k = yield* Tokenizer.counter("o200k_base")
      const cl100k = yield* Tokenizer.counter("cl100k_base")
      assert.strictEqual(o200k.count("hello world"), 2)
      assert.strictEqual(cl100k.count("hello world"), 2)
      assert.strictEqual(o200k.count(""), 0)
      // Special-token text from untrusted input is counted as text, not refused.
      assert.isAbove(o200k.count("<|endoftext|> and <|im_start|>"), 4)
      assert.strictEqual(Tokenizer.approximateCount("abcdefg"), Math.ceil((7 / 3.5) * 1.1))
      assert.strictEqual(Tokenizer.approximateCount("日本語"), Math.ceil(3 * 1.1))
      const request = {
        instructions: "Be brief.",
        messages: [{ role: "user" as const, text: "hello world" }],
        tools: []
      }
      assert.strictEqual(Tokenizer.requestTokens(o200k, request), 3 + (3 + 3) + (3 + 2))
    })
  )

  it("knows the windows of known models and takes overrides", () => {
    const gpt41 = ModelLimits.limitsFor("openai:gpt-4.1-mini")
    assert.deepStrictEqual(gpt41, {
      contextWindow: 1_047_576,
      outputReserve: 32_768,
      encoding: "o200k_base",
      images: true
    })
    assert.strictEqual(ModelLimits.limitsFor("openai:gpt-4o-mini").contextWindow, 128_000)
    assert.strictEqual(ModelLimits.limitsFor("openai:o3-mini").encoding, "o200k_base")
    assert.strictEqual(ModelLimits.limitsFor("openai:gpt-3.5-turbo").encoding, "cl100k_base")
    assert.strictEqual(ModelLimits.limitsFor("anthropic:claude-sonnet-4-5").contextWindow, 200_000)
    assert.strictEqual(ModelLimits.limitsFor("anthropic:claude-sonnet-4-5").encoding, "approximate")
    assert.strictEqual(ModelLimits.limitsFor("openai-compatible:http://h:1/v1#llama3.1:8b").contextWindow, 131_072)
    assert.strictEqual(ModelLimits.limitsFor("openai-compatible:http://h:1/v1#llama3:8b").contextWindow, 8_192)
    assert.deepStrictEqual(ModelLimits.limitsFor("demo:scripted"), ModelLimits.fallback)
    assert.strictEqual(ModelLimits.limitsFor("openai:gpt-4.1,anthropic:claude-3-5-haiku").contextWindow, 200_000)
    assert.strictEqual(ModelLimits.limitsFor("x:unknown", { contextWindow: 50_000 }).contextWindow, 50_000)
    // Which models take images: known families, fail-over lists only when all do, overridable.
    assert.isTrue(ModelLimits.limitsFor("openai:gpt-4o-mini").images)
    assert.isFalse(ModelLimits.limitsFor("openai:gpt-3.5-turbo").images)
    assert.isFalse(ModelLimits.limitsFor("openai:gpt-4.1,openai:gpt-3.5-turbo").images)
    assert.isTrue(ModelLimits.limitsFor("openai-compatible:http://h:1/v1#llava:13b").images)
    assert.isFalse(ModelLimits.limitsFor("demo:scripted").images)
    assert.isTrue(ModelLimits.limitsFor("x:unknown", { images: true }).images)
  })

  it.effect("options are checked", () =>
    Effect.gen(function* () {
      const journal = yield* MemoryJournal.make()
      const model = ScriptedModel.make([])
      const e1 = yield* Effect.flip(ContextEngine.make({ journal, model, triggerRatio: 1.5 }))
      assert.strictEqual(e1._tag, "InvalidArgument")
      const e2 = yield* Effect.flip(ContextEngine.make({ journal, model, contextWindow: 1_000, outputReserve: 1_000 }))
      assert.strictEqual(e2._tag, "InvalidArgument")
    })
  )
})
