/**
 * A folded conversation's messages are handed out and kept (the prompt stage's memo, the model
 * adapter's per-message provider form): a later fold must put new messages in their place, never
 * change one already handed out — a tool call proposed after its assistant message was folded
 * included.
 */
import { assert, describe, it } from "@effect/vitest"
import { MockLanguageModelV4 } from "ai/test"
import { Effect } from "effect"
import { AiSdkModel } from "../src/ai-sdk.js"
import type { TapeEvent } from "../src/index.js"
import { emptyFold, foldedMessages, foldMessages } from "../src/kernel/internal/history.js"

const base = { sessionId: "s", runId: "r", at: 0 }
const opening = [
  { ...base, _tag: "UserMessage", tapeSeq: 1, text: "hi" },
  { ...base, _tag: "AssistantMessage", tapeSeq: 2, turn: 1, text: "calling", finishReason: "tool-calls" }
] as unknown as ReadonlyArray<TapeEvent.TapeEvent>
const toolTurn = [
  { ...base, _tag: "ToolProposed", tapeSeq: 3, toolCallId: "t1", tool: "echo", args: { x: 1 } },
  { ...base, _tag: "ToolResult", tapeSeq: 4, toolCallId: "t1", tool: "echo", status: "ok", output: "x" }
] as unknown as ReadonlyArray<TapeEvent.TapeEvent>

describe("folding a conversation", () => {
  it("never changes a message it handed out", () => {
    const fold = emptyFold()
    foldMessages(fold, opening)
    const handedOut = foldedMessages(fold)
    const before = structuredClone(handedOut)
    foldMessages(fold, toolTurn)
    assert.deepStrictEqual(handedOut, before)
    const after = foldedMessages(fold)
    const assistant = after.find((m) => m.role === "assistant")
    assert.deepStrictEqual(assistant?.role === "assistant" ? assistant.toolCalls : [], [
      { id: "t1", name: "echo", args: { x: 1 } }
    ])
    assert.deepStrictEqual(
      after.map((m) => m.role),
      ["user", "assistant", "tool"]
    )
  })

  it.live("the model gets an assistant's tool call proposed after the message was first sent", () =>
    Effect.gen(function* () {
      const prompts: Array<Array<{ role: string; content: unknown }>> = []
      const model = AiSdkModel.make(
        new MockLanguageModelV4({
          doStream: async (options) => {
            prompts.push(JSON.parse(JSON.stringify(options.prompt)))
            return { stream: new ReadableStream({ start: (c) => c.close() }) }
          }
        }) as never
      )
      const fold = emptyFold()
      foldMessages(fold, opening)
      yield* model.streamToNow!({ messages: foldedMessages(fold), tools: [] }, () => undefined)
      foldMessages(fold, toolTurn)
      yield* model.streamToNow!({ messages: foldedMessages(fold), tools: [] }, () => undefined)
      const assistant = prompts[1]?.find((m) => m.role === "assistant")
      assert.deepStrictEqual(
        ((assistant?.content ?? []) as Array<{ type: string }>).map((p) => p.type),
        ["text", "tool-call"]
      )
    })
  )
})
