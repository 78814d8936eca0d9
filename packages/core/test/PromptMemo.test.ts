/**
 * The default prompt stage keeps each recent session's conversation folded so far and folds only
 * what was committed since. What it builds must be exactly what folding the whole history gives:
 * as a session grows (with and without its streamed deltas), after a reset, when a history does not
 * continue the memo, and when sessions are evicted.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import type { Session } from "../src/domain/Records.js"
import { Caller, ScriptedModel, type TapeEvent, Tool } from "../src/index.js"
import { fromHistory, makeFromHistory } from "../src/kernel/PromptAssembler.js"
import { collect } from "../src/testing.js"
import { withGateway } from "./helpers.js"

const calc = Tool.make("calc", {
  description: "calc",
  parameters: Schema.Struct({ x: Schema.Number }),
  risk: "low",
  execute: ({ x }) => Effect.succeed(x * 2)
})

/** A real tape: runs of one session with streamed deltas, tool calls (one unknown) and answers. */
const realTape = Effect.gen(function* () {
  const model = ScriptedModel.make((request, i) =>
    request.messages.at(-1)?.role === "user"
      ? {
          toolCalls: [
            { name: "calc", args: { x: i } },
            { name: "nope", args: {} }
          ]
        }
      : { text: ["an", "swer ", `${i}`] }
  )
  return yield* withGateway({ model, tools: [calc], coalesceChars: 1 }, (gateway) =>
    Effect.gen(function* () {
      const alice = Caller.user("alice")
      let sessionId: TapeEvent.TapeEvent["sessionId"] | undefined
      for (const text of ["one", "two", "three"]) {
        const { events, session } = yield* gateway.startRun(alice, { text, key: "k" })
        yield* collect(events)
        sessionId = session.id
      }
      const session = yield* gateway.getSession(alice, sessionId!)
      const tape = yield* gateway.readTape(alice, sessionId!, { afterSeq: 0 })
      return { session, tape }
    })
  )
})

const assemble = (
  stage: typeof fromHistory,
  session: Session,
  history: ReadonlyArray<TapeEvent.TapeEvent>
): Effect.Effect<unknown> =>
  Effect.map(
    stage.assemble({ session, runId: history[0]!.runId!, history, instructions: "be brief", tools: [] }),
    (a) => a.request
  ).pipe(Effect.orDie)

describe("the prompt memo", () => {
  it.effect("grows with the session, with or without deltas, and builds what a whole fold builds", () =>
    Effect.gen(function* () {
      const { session, tape } = yield* realTape
      assert.isAbove(tape.filter((e) => e._tag === "AssistantDelta").length, 3)
      const memo = makeFromHistory()
      for (let n = 1; n <= tape.length; n++) {
        // Alternate: the run's own history (deltas included) and a reloaded one (deltas dropped).
        const prefix = tape.slice(0, n).filter((e) => n % 2 === 0 || e._tag !== "AssistantDelta")
        if (prefix.length === 0) continue
        assert.deepStrictEqual(yield* assemble(memo, session, prefix), yield* assemble(fromHistory, session, prefix))
      }
    })
  )

  it.effect("starts over after a reset, for a history that does not continue it, and after eviction", () =>
    Effect.gen(function* () {
      const { session, tape } = yield* realTape
      const memo = makeFromHistory(1)
      const same = (s: Session, h: ReadonlyArray<TapeEvent.TapeEvent>) =>
        Effect.gen(function* () {
          assert.deepStrictEqual(yield* assemble(memo, s, h), yield* assemble(fromHistory, s, h))
        })
      yield* same(session, tape)
      // A reset: the history starts later (and the session says so).
      const from = tape.findIndex((e) => e._tag === "UserMessage" && e.text === "three")
      const reset = { ...session, historyFromSeq: tape[from - 1]!.tapeSeq }
      yield* same(reset, tape.slice(from))
      // Fewer events than the memo folded (not a continuation): folded anew.
      yield* same(reset, tape.slice(from, from + 3))
      // Another session evicts this one (capacity 1); coming back folds anew.
      const other = { ...session, id: "other" as Session["id"] }
      yield* same(other, tape.slice(0, 5))
      yield* same(session, tape)
      // A branched session is folded whole every time.
      const branch = { ...session, parentId: "parent" as Session["id"], parentSeq: 3 }
      yield* same(branch, tape.slice(0, 7))
      yield* same(branch, tape)
    })
  )
})
