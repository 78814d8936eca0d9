/**
 * The fold keeps its conversation paired (every tool call followed by its result) and its
 * characters counted as it grows, so a model call walks only what was folded since the last one.
 * What it answers must be exactly what pairing and counting the whole conversation again gives —
 * after every event of a long loop, with parallel calls, results out of order, a call left without
 * a result, a result before its call, a repeated call id and a compaction — and the prompt stage's
 * estimate exactly `estimateTokens` of the request it built.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import type { Session } from "../src/domain/Records.js"
import { makeSession } from "../src/domain/Records.js"
import { ModelProvider, type TapeEvent } from "../src/index.js"
import { emptyFold, foldedChars, foldedMessages, foldMessages } from "../src/kernel/internal/history.js"
import { fromHistory, makeFromHistory } from "../src/kernel/PromptAssembler.js"

type PromptMessage = ModelProvider.PromptMessage

/** The pairing as it was written before it was made incremental: the whole conversation each time. */
const pairWhole = (messages: ReadonlyArray<PromptMessage>): Array<PromptMessage> => {
  const out: Array<PromptMessage> = []
  const results = new Map<string, PromptMessage>()
  for (const m of messages) if (m.role === "tool") results.set(m.toolCallId, m)
  for (const m of messages) {
    if (m.role === "tool") continue
    out.push(m)
    if (m.role === "assistant") {
      for (const call of m.toolCalls) {
        out.push(
          results.get(call.id) ?? {
            role: "tool",
            toolCallId: call.id,
            name: call.name,
            output: "[interrupted] no result: the run ended before this call finished",
            isError: true
          }
        )
      }
    }
  }
  return out
}

const base = { sessionId: "s", runId: "r", at: 0 }
let seq = 0
const ev = (e: Record<string, unknown>) => ({ ...base, tapeSeq: ++seq, ...e }) as unknown as TapeEvent.TapeEvent
const user = (text: string) => ev({ _tag: "UserMessage", text })
const assistant = (text: string) => ev({ _tag: "AssistantMessage", turn: 1, text, finishReason: "tool-calls" })
const proposed = (id: string, x: number) => ev({ _tag: "ToolProposed", toolCallId: id, tool: "calc", args: { x } })
const result = (id: string, output: string, status = "ok") =>
  ev({ _tag: "ToolResult", toolCallId: id, tool: "calc", status, output, truncated: false, durationMs: 1 })
const delta = (text: string) => ev({ _tag: "AssistantDelta", turn: 1, text })

/** A long loop and its awkward cases, in tape order. */
const tape = (): Array<TapeEvent.TapeEvent> => {
  seq = 0
  const out: Array<TapeEvent.TapeEvent> = [user("start")]
  for (let step = 0; step < 50; step++) {
    out.push(delta("thinking"), assistant(`step ${step}`))
    if (step % 7 === 3) {
      // Two calls in parallel, their results in the other order.
      out.push(proposed(`a${step}`, step), proposed(`b${step}`, step), result(`b${step}`, "B"), result(`a${step}`, "A"))
    } else if (step === 12) {
      // A call that never gets its result (the run ended), then a new turn.
      out.push(proposed("lost", step), user("again"))
    } else if (step === 20) {
      // A result for a call not proposed yet (an orphan until it is), and a second result for one id.
      out.push(result("early", "E"), proposed("early", step), proposed("twice", step))
      out.push(result("twice", "first", "error"), result("twice", "second"))
    } else if (step === 30) {
      // A call id used again later in the conversation.
      out.push(proposed("c3", step), result("c3", "again"))
    } else if (step === 40) {
      out.push(ev({ _tag: "CompactionApplied", summary: "earlier steps", toSeq: 8, fromSeq: 1 }))
      out.push(proposed(`c${step}`, step), result(`c${step}`, String(step)))
    } else {
      out.push(proposed(`c${step}`, step), result(`c${step}`, String(step)))
    }
  }
  out.push(assistant("done"))
  return out
}

const charsOf = (messages: ReadonlyArray<PromptMessage>) =>
  messages.reduce((n, m) => n + ModelProvider.messageChars(m), 0)

describe("the incremental pairing and character count", () => {
  it("equal the whole conversation's, after every event", () => {
    const events = tape()
    const fold = emptyFold()
    for (const [i, e] of events.entries()) {
      foldMessages(fold, [e])
      const whole = pairWhole(fold.messages)
      // Every other event asks for the messages first, then the characters; the rest the other way.
      const chars = i % 2 === 0 ? foldedChars(fold) : undefined
      assert.deepStrictEqual(foldedMessages(fold), whole, `after event ${i} (${e._tag})`)
      assert.strictEqual(chars ?? foldedChars(fold), charsOf(whole), `characters after event ${i}`)
    }
    // The cases above were all reached: a missing result, an orphan picked up, the later result of one id.
    const final = foldedMessages(fold)
    assert.isTrue(final.some((m) => m.role === "tool" && m.output.startsWith("[interrupted]")))
    assert.isTrue(final.some((m) => m.role === "tool" && m.toolCallId === "early" && m.output === "E"))
    assert.isTrue(final.some((m) => m.role === "tool" && m.toolCallId === "twice" && m.output === "second"))
    assert.isTrue(final.some((m) => m.role === "system"))
  })

  it("a list handed out is not changed by later events", () => {
    const events = tape()
    const fold = emptyFold()
    const handed: Array<{ list: Array<PromptMessage>; copy: Array<PromptMessage> }> = []
    for (const e of events) {
      foldMessages(fold, [e])
      const list = foldedMessages(fold)
      handed.push({ list, copy: [...list] })
    }
    for (const { list, copy } of handed) assert.deepStrictEqual(list, copy)
  })

  it.effect("the prompt stage's estimate is `estimateTokens` of its request, step by step", () =>
    Effect.gen(function* () {
      const events = tape()
      const session: Session = makeSession({ id: "s" as never, principal: "p" })
      const memo = makeFromHistory()
      const tools = [{ name: "calc", description: "doubles", parameters: { type: "object" } }]
      for (let n = 1; n <= events.length; n++) {
        const input = { session, runId: "r" as never, history: events.slice(0, n), instructions: "be brief", tools }
        const a = yield* memo.assemble(input)
        const b = yield* fromHistory.assemble(input)
        assert.deepStrictEqual(a.request, b.request)
        assert.strictEqual(a.estimatedTokens, ModelProvider.estimateTokens(a.request), `after ${n} events`)
        assert.strictEqual(b.estimatedTokens, a.estimatedTokens)
        assert.deepStrictEqual(a.request.messages, pairWhole(foldMessages(emptyFold(), events.slice(0, n)).messages))
      }
    }).pipe(Effect.orDie)
  )
})
