/**
 * The run loop is a fold: at every point where the loop has committed an append (the only points a
 * crash can leave behind), folding the tape so far gives the state the loop is in, and `RunView.next`
 * names exactly what the loop wrote next. Checked over random scripts through the real Gateway.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Schema, Stream } from "effect"
import * as fc from "fast-check"
import {
  Caller,
  Gateway,
  Journal,
  MemoryJournal,
  RunState,
  RunView,
  ScriptedModel,
  type TapeEvent,
  Tool
} from "../src/index.js"
import { collect, gatewayLayer } from "../src/testing.js"

const tool = (name: string, risk: "low" | "sensitive" | "critical", fails = false) =>
  Tool.make(name, {
    description: name,
    parameters: Schema.Struct({ n: Schema.Number }),
    risk,
    execute: ({ n }) => (fails ? Effect.dieMessage("boom") : Effect.succeed({ n }))
  })
const tools = [tool("low.ok", "low"), tool("needs.approval", "sensitive"), tool("never", "critical")]
const toolNames = ["low.ok", "needs.approval", "never", "no.such.tool"] as const

const turn = fc.oneof(
  fc.record({ text: fc.constantFrom("hi", "thinking", "") }),
  fc.record({
    toolCalls: fc.array(
      fc.record({ name: fc.constantFrom(...toolNames), args: fc.record({ n: fc.integer({ min: 0, max: 9 }) }) }),
      { minLength: 1, maxLength: 3 }
    )
  })
)
const scenario = fc.record({
  turns: fc.array(turn, { maxLength: 4 }),
  decisions: fc.array(fc.constantFrom("approve" as const, "deny" as const), { minLength: 12, maxLength: 12 })
})

/** Whether the first event of the next append is the step `next` names (or the open turn going on). */
const matches = (view: RunView.RunView, next: RunView.Next, e: TapeEvent.TapeEvent): boolean => {
  switch (next._tag) {
    case "Start":
      return e._tag === "UserMessage"
    case "ModelTurn":
      return view.turnOpen
        ? (e._tag === "AssistantDelta" || e._tag === "AssistantMessage") && e.turn === view.turn
        : e._tag === "ModelRequest" && e.turn === view.turn + 1
    case "Complete":
      return e._tag === "RunStateChanged" && e.to === "Done"
    case "Call":
      return "toolCallId" in e && e.toolCallId === next.call.proposed.toolCallId
    case "Finished":
      return false
  }
}

describe("RunView", () => {
  it.effect("folding the tape at every committed append predicts the loop's next append", () =>
    Effect.promise(() =>
      fc.assert(
        fc.asyncProperty(scenario, async ({ turns, decisions }) => {
          const groups: Array<ReadonlyArray<TapeEvent.TapeEvent>> = []
          const recording = Layer.effect(
            Journal.Journal,
            Effect.map(Journal.Journal, (inner) => ({
              ...inner,
              append: (sessionId, events, effects) =>
                Effect.tap(inner.append(sessionId, events, effects), (stored) => Effect.sync(() => groups.push(stored)))
            }))
          ).pipe(Layer.provide(MemoryJournal.layer()))
          const model = ScriptedModel.make([...turns, { text: "done" }])
          const program = Effect.gen(function* () {
            const gateway = yield* Gateway.Gateway
            let i = 0
            yield* gateway.watchApprovals(Caller.operator("op")).pipe(
              Stream.runForEach((a) =>
                gateway
                  .resolveApproval(Caller.operator("op"), { approvalId: a.id, decision: decisions[i++ % 12]! })
                  .pipe(Effect.ignore)
              ),
              Effect.forkScoped
            )
            yield* Effect.yieldNow()
            const started = yield* gateway.startRun(Caller.user("alice"), { text: "go" })
            yield* collect(started.events)
            return started.run.id
          })
          const runId = await Effect.runPromise(
            program.pipe(Effect.provide(gatewayLayer({ model, tools, journal: recording })), Effect.scoped)
          )
          const runGroups = groups.filter((g) => g.some((e) => e.runId === runId))
          let prefix: Array<TapeEvent.TapeEvent> = []
          for (let k = 0; k < runGroups.length; k++) {
            prefix = [...prefix, ...runGroups[k]!]
            const view = RunView.fold(runId, prefix, "Pending")
            const lastChange = prefix.filter((e) => e._tag === "RunStateChanged").at(-1)
            expect(view.state).toBe(lastChange?._tag === "RunStateChanged" ? lastChange.to : "Pending")
            const next = RunView.next(view)
            const following = runGroups[k + 1]
            if (following === undefined) {
              expect(next._tag).toBe("Finished")
              expect(RunState.isTerminal(view.state)).toBe(true)
            } else if (k > 0) {
              // (the first group is the admission, written by the Gateway before the loop starts)
              expect({
                next: next._tag,
                got: following[0]!._tag,
                ok: matches(view, next, following[0]!)
              }).toMatchObject({
                ok: true
              })
            }
          }
          expect(RunView.fold(runId, prefix, "Pending").state).toBe("Done")
        }),
        { numRuns: 40 }
      )
    )
  )
})
