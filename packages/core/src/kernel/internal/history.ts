import type { TapeEvent } from "../../domain/TapeEvent.js"
import type { PromptMessage } from "../../ports/ModelProvider.js"

type AssistantMsg = Extract<PromptMessage, { role: "assistant" }> & {
  toolCalls: Array<{ id: string; name: string; args: unknown }>
}

/**
 * The conversation folded from tape events so far: extended event by event, so a session's prompt
 * is not rebuilt from its whole history at every model call (see `PromptAssembler`).
 * @internal
 */
export interface MessageFold {
  messages: Array<PromptMessage>
  // The tape seq each message came from: a compaction replaces only what it covers (up to its
  // `toSeq`); turns it kept verbatim after that stay.
  readonly seqOf: Map<PromptMessage, number>
  lastAssistant: AssistantMsg | undefined
}

/** @internal */
export const emptyFold = (): MessageFold => ({ messages: [], seqOf: new Map(), lastAssistant: undefined })

/** Fold more events (in tapeSeq order) into `fold`, in place. @internal */
export const foldMessages = (fold: MessageFold, events: Iterable<TapeEvent>): MessageFold => {
  const { seqOf } = fold
  for (const e of events) {
    switch (e._tag) {
      case "CompactionApplied": {
        const summary: PromptMessage = { role: "system", text: `Summary of the earlier conversation:\n${e.summary}` }
        fold.messages = [summary, ...fold.messages.filter((m) => (seqOf.get(m) ?? 0) > e.toSeq)]
        if (fold.lastAssistant && !fold.messages.includes(fold.lastAssistant)) fold.lastAssistant = undefined
        break
      }
      case "UserMessage": {
        const m: PromptMessage = { role: "user", text: e.text }
        fold.messages.push(m)
        seqOf.set(m, e.tapeSeq)
        fold.lastAssistant = undefined
        break
      }
      case "AssistantMessage": {
        const m: AssistantMsg = { role: "assistant", text: e.text, toolCalls: [] }
        fold.messages.push(m)
        seqOf.set(m, e.tapeSeq)
        fold.lastAssistant = m
        break
      }
      case "ToolProposed": {
        const last = fold.lastAssistant
        const at = last === undefined ? -1 : fold.messages.lastIndexOf(last)
        if (last === undefined || at < 0) break
        // A new message in the old one's place, never the old one changed: folded messages are
        // handed out and kept (the prompt's memo, the model adapter's per-message provider form).
        const m: AssistantMsg = {
          ...last,
          toolCalls: [...last.toolCalls, { id: e.toolCallId, name: e.tool, args: e.args }]
        }
        fold.messages[at] = m
        seqOf.set(m, seqOf.get(last) ?? e.tapeSeq)
        seqOf.delete(last)
        fold.lastAssistant = m
        break
      }
      case "ToolResult": {
        const m: PromptMessage = {
          role: "tool",
          toolCallId: e.toolCallId,
          name: e.tool,
          output: e.status === "ok" ? e.output : `[${e.status}] ${e.output}`,
          isError: e.status !== "ok"
        }
        fold.messages.push(m)
        seqOf.set(m, e.tapeSeq)
        break
      }
      default:
        break
    }
  }
  return fold
}

/** The messages of a fold as the model gets them: every tool call followed by its result. @internal */
export const foldedMessages = (fold: MessageFold): Array<PromptMessage> => pairToolResults(fold.messages)

/**
 * Rebuild the conversation the model sees from tape events (in tapeSeq order). A compaction replaces
 * the range it covers with its summary. Every tool call gets a result message: a call whose run ended
 * before it finished gets an explicit "no result" so providers that pair calls and results accept it.
 * @internal
 */
export const buildMessages = (events: Iterable<TapeEvent>): Array<PromptMessage> =>
  foldedMessages(foldMessages(emptyFold(), events))

const pairToolResults = (messages: Array<PromptMessage>): Array<PromptMessage> => {
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
