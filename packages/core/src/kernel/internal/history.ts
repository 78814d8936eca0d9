import type { TapeEvent } from "../../domain/TapeEvent.js"
import { messageChars, type PromptMessage } from "../../ports/ModelProvider.js"

type AssistantMsg = Extract<PromptMessage, { role: "assistant" }> & {
  toolCalls: Array<{ id: string; name: string; args: unknown }>
}

/**
 * The conversation folded from tape events so far: extended event by event, so a session's prompt
 * is not rebuilt from its whole history at every model call (see `PromptAssembler`).
 *
 * Beside the messages it keeps them paired as the model gets them (`paired`: every tool call
 * followed by its result) and their characters (`chars`, as `estimateTokens` counts them), both
 * updated per event: a model call in a long tool loop walks only what was folded since the last one,
 * not the whole conversation twice (the pairing and the estimate were O(messages) per call, O(n²)
 * per run). A compaction (which rewrites the conversation) repairs them whole, at the next call.
 * @internal
 */
export interface MessageFold {
  messages: Array<PromptMessage>
  // The tape seq each message came from: a compaction replaces only what it covers (up to its
  // `toSeq`); turns it kept verbatim after that stay.
  readonly seqOf: Map<PromptMessage, number>
  lastAssistant: AssistantMsg | undefined
  /** The last tool message of each call id (the result a call is paired with). */
  readonly results: Map<string, PromptMessage>
  /** `messages` paired (see `foldedMessages`); rebuilt whole when `repair` is set. */
  paired: Array<PromptMessage>
  /** The characters of `paired`'s messages (`messageChars` summed). */
  chars: number
  /** Where each call's result sits in `paired`. */
  readonly slots: Map<string, number>
  /** Where `lastAssistant` sits in `paired` (-1: not there). */
  assistantAt: number
  /** The length of `lastAssistant`'s calls as JSON (what `messageChars` counts for them). */
  callsChars: number
  /** `paired`, `chars` and `slots` no longer follow `messages` (a compaction, a repeated call id). */
  repair: boolean
}

/** @internal */
export const emptyFold = (): MessageFold => ({
  messages: [],
  seqOf: new Map(),
  lastAssistant: undefined,
  results: new Map(),
  paired: [],
  chars: 0,
  slots: new Map(),
  assistantAt: -1,
  callsChars: 2,
  repair: false
})

const noResult = (call: { readonly id: string; readonly name: string }): PromptMessage => ({
  role: "tool",
  toolCallId: call.id,
  name: call.name,
  output: "[interrupted] no result: the run ended before this call finished",
  isError: true
})

/** Put `m` at `paired[at]` (a slot or the assistant's place), keeping `chars`. */
const setPaired = (fold: MessageFold, at: number, m: PromptMessage) => {
  fold.chars += messageChars(m) - messageChars(fold.paired[at]!)
  fold.paired[at] = m
}
/** Append `m` to `paired`. */
const pushPaired = (fold: MessageFold, m: PromptMessage) => {
  fold.chars += messageChars(m)
  fold.paired.push(m)
}
/** Append a call's result (or its "no result") after its assistant message, and note its slot. */
const pushResult = (fold: MessageFold, call: { readonly id: string; readonly name: string }) => {
  if (fold.slots.has(call.id)) fold.repair = true
  fold.slots.set(call.id, fold.paired.length)
  pushPaired(fold, fold.results.get(call.id) ?? noResult(call))
}

/** Fold more events (in tapeSeq order) into `fold`, in place. @internal */
export const foldMessages = (fold: MessageFold, events: Iterable<TapeEvent>): MessageFold => {
  const { seqOf } = fold
  for (const e of events) {
    switch (e._tag) {
      case "CompactionApplied": {
        const summary: PromptMessage = { role: "system", text: `Summary of the earlier conversation:\n${e.summary}` }
        fold.messages = [summary, ...fold.messages.filter((m) => (seqOf.get(m) ?? 0) > e.toSeq)]
        if (fold.lastAssistant && !fold.messages.includes(fold.lastAssistant)) fold.lastAssistant = undefined
        fold.repair = true
        break
      }
      case "UserMessage": {
        const m: PromptMessage = { role: "user", text: e.text }
        fold.messages.push(m)
        seqOf.set(m, e.tapeSeq)
        fold.lastAssistant = undefined
        if (!fold.repair) {
          pushPaired(fold, m)
          fold.assistantAt = -1
        }
        break
      }
      case "AssistantMessage": {
        const m: AssistantMsg = { role: "assistant", text: e.text, toolCalls: [] }
        fold.messages.push(m)
        seqOf.set(m, e.tapeSeq)
        fold.lastAssistant = m
        if (!fold.repair) {
          // `messageChars` of a message without calls: its text and `[]`.
          fold.chars += m.text.length + 2
          fold.paired.push(m)
          fold.assistantAt = fold.paired.length - 1
          fold.callsChars = 2
        }
        break
      }
      case "ToolProposed": {
        const last = fold.lastAssistant
        const at = last === undefined ? -1 : fold.messages.lastIndexOf(last)
        if (last === undefined || at < 0) break
        // A new message in the old one's place, never the old one changed: folded messages are
        // handed out and kept (the prompt's memo, the model adapter's per-message provider form).
        const call = { id: e.toolCallId, name: e.tool, args: e.args }
        const m: AssistantMsg = { ...last, toolCalls: [...last.toolCalls, call] }
        fold.messages[at] = m
        seqOf.set(m, seqOf.get(last) ?? e.tapeSeq)
        seqOf.delete(last)
        fold.lastAssistant = m
        // The last assistant message is the last non-tool one: in `paired` only its calls' results
        // follow it, so the new call's result goes at the end.
        if (!fold.repair && fold.assistantAt >= 0 && fold.paired[fold.assistantAt] === last) {
          // The calls' JSON grows by this call's (and a comma): not the whole list stringified again.
          const callsChars = fold.callsChars + JSON.stringify(call).length + (last.toolCalls.length === 0 ? 0 : 1)
          fold.chars += callsChars - fold.callsChars
          fold.callsChars = callsChars
          fold.paired[fold.assistantAt] = m
          pushResult(fold, call)
        } else fold.repair = true
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
        fold.results.set(m.toolCallId, m)
        // A call already paired gets this result in its slot; a later call with this id picks it up.
        const slot = fold.slots.get(m.toolCallId)
        if (!fold.repair && slot !== undefined) setPaired(fold, slot, m)
        break
      }
      default:
        break
    }
  }
  return fold
}

/** Pair `fold.messages` whole again (after a compaction): `paired`, `chars`, `slots`, `results`. */
const repairPaired = (fold: MessageFold) => {
  fold.results.clear()
  fold.slots.clear()
  fold.paired = []
  fold.chars = 0
  fold.assistantAt = -1
  fold.repair = false
  for (const m of fold.messages) if (m.role === "tool") fold.results.set(m.toolCallId, m)
  for (const m of fold.messages) {
    if (m.role === "tool") continue
    pushPaired(fold, m)
    if (m.role === "assistant") {
      if (m === fold.lastAssistant) {
        fold.assistantAt = fold.paired.length - 1
        fold.callsChars = JSON.stringify(m.toolCalls).length
      }
      for (const call of m.toolCalls) pushResult(fold, call)
    }
  }
  // A call id repeated: a later result must land in every slot of that id. Rare (ids are minted per
  // call); such a fold stays in repair mode and is paired whole at each call.
  if (fold.repair) fold.slots.clear()
}

/**
 * The messages of a fold as the model gets them: every tool call followed by its result (the last
 * one for its id), a call without one followed by an explicit "no result", other tool messages left
 * out. A new array each call (the fold's own goes on changing). @internal
 */
export const foldedMessages = (fold: MessageFold): Array<PromptMessage> => {
  if (fold.repair) repairPaired(fold)
  return fold.paired.slice()
}

/** The characters of `foldedMessages(fold)`'s messages (`messageChars` summed). @internal */
export const foldedChars = (fold: MessageFold): number => {
  if (fold.repair) repairPaired(fold)
  return fold.chars
}

/**
 * Rebuild the conversation the model sees from tape events (in tapeSeq order). A compaction replaces
 * the range it covers with its summary. Every tool call gets a result message: a call whose run ended
 * before it finished gets an explicit "no result" so providers that pair calls and results accept it.
 * @internal
 */
export const buildMessages = (events: Iterable<TapeEvent>): Array<PromptMessage> =>
  foldedMessages(foldMessages(emptyFold(), events))
