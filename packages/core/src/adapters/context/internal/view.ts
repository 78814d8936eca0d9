import type { SessionId } from "../../../domain/Ids.js"
import type { TapeEvent, TapeEventOf } from "../../../domain/TapeEvent.js"
import type { PromptMessage } from "../../../ports/ModelProvider.js"
import { attachmentTokens, type Counter, messageTokens } from "../Tokenizer.js"

/**
 * The context view: what a session's prompt is made of at one point of its tape — the active
 * compaction summary, then the steps after what it covers. It is a left fold of the prompt history
 * (`step`), built cold by scanning back from the end to the last compaction or restore only (`build`),
 * so neither costs more than the window it describes.
 *
 * Positions: the history holds the ancestors' events (for branches) before the session's own, so an
 * event's place is `rank(session) * 2^40 + tapeSeq` (`key`), and a compaction covers every step whose
 * key is at most `key(its session, toSeq)`.
 * @internal
 */

/** The prefix of the message that carries a summary (the same framing as the kernel's default). @internal */
export const SUMMARY_PREFIX = "Summary of the earlier conversation:\n"
const NO_RESULT = "[interrupted] no result: the run ended before this call finished"
const SEQ_SPACE = 2 ** 40

/** @internal */
export type ToolMessage = Extract<PromptMessage, { role: "tool" }>
type AssistantMessage = Extract<PromptMessage, { role: "assistant" }>

/** One tool call of an assistant step. @internal */
export interface Call {
  readonly id: string
  readonly name: string
  readonly args: unknown
  readonly owner: Step
  result: ToolMessage | undefined
  /** Key of the result event (Infinity while there is none). */
  resultKey: number
  placeholder: ToolMessage | undefined
}

/** A user message, or an assistant message with its tool calls and their results. @internal */
export interface Step {
  readonly kind: "user" | "assistant"
  readonly sessionId: SessionId
  readonly seq: number
  readonly key: number
  message: PromptMessage
  readonly calls: Array<Call>
  tokens: number | undefined
  /** What the message's attachments add once the kernel puts them in (`Attachments.resolving`). */
  readonly attachmentTokens: number
}

/** @internal */
export interface Summary {
  readonly event: TapeEventOf<"CompactionApplied">
  readonly message: PromptMessage
  tokens: number | undefined
}

/** @internal */
export interface View {
  summary: Summary | undefined
  steps: Array<Step>
  /** Calls by tool call id (for results), only those of `steps`. */
  calls: Map<string, Call>
  /** Notes after the summary (pinned: they go into the next summary verbatim). */
  notes: Array<{ readonly key: number; readonly event: TapeEventOf<"SessionNote"> }>
  /** Tool calls with an approval requested and neither resolved nor answered. */
  openApprovals: Set<string>
  /** Model calls since the last compaction or restore (the cooldown counts these). */
  turnsSinceMarker: number
  /** Key of the last restore: a later compaction must cover it. */
  restoreKey: number
}

/** @internal */
export const empty = (): View => ({
  summary: undefined,
  steps: [],
  calls: new Map(),
  notes: [],
  openApprovals: new Set(),
  turnsSinceMarker: 0,
  restoreKey: -1
})

/** Session ranks in history order: the oldest ancestor first, the session itself last. @internal */
export class Ranks {
  private readonly ranks = new Map<SessionId, number>()
  constructor(chain: ReadonlyArray<SessionId>) {
    for (const id of chain) this.ranks.set(id, this.ranks.size)
  }
  rank(sessionId: SessionId): number {
    let r = this.ranks.get(sessionId)
    if (r === undefined) {
      r = this.ranks.size
      this.ranks.set(sessionId, r)
    }
    return r
  }
  key(sessionId: SessionId, seq: number): number {
    return this.rank(sessionId) * SEQ_SPACE + seq
  }
}

/** A restore was met where its base view cannot be built: the caller rebuilds from the whole history. @internal */
export class NeedsRebuild extends Error {}

const summaryOf = (event: TapeEventOf<"CompactionApplied">): Summary => ({
  event,
  message: { role: "system", text: `${SUMMARY_PREFIX}${event.summary}` },
  tokens: undefined
})

/** Apply a compaction: the summary replaces every step up to the covered point. @internal */
export const applyCompaction = (view: View, event: TapeEventOf<"CompactionApplied">, ranks: Ranks): void => {
  const covered = ranks.key(event.sessionId, event.toSeq)
  view.summary = summaryOf(event)
  view.steps = view.steps.filter((s) => s.key > covered)
  view.calls = new Map()
  for (const s of view.steps) for (const c of s.calls) view.calls.set(c.id, c)
  for (const id of view.openApprovals) if (!view.calls.has(id)) view.openApprovals.delete(id)
  view.notes = view.notes.filter((n) => n.key > covered)
  view.turnsSinceMarker = 0
}

const resultMessage = (e: TapeEventOf<"ToolResult">): ToolMessage => ({
  role: "tool",
  toolCallId: e.toolCallId,
  name: e.tool,
  output: e.status === "ok" ? e.output : `[${e.status}] ${e.output}`,
  isError: e.status !== "ok"
})

/**
 * Notes Palyra writes about its own work (resolved references, facts written, memory injected or
 * learned, the watchdog): on the tape for people, never pinned into summaries (nor, through them,
 * into a facts file).
 */
const BOOKKEEPING = new Set(["references", "facts", "memory", "learning", "watchdog"])

/**
 * Fold one event into the view (the same conversation rules as the kernel's `buildMessages`).
 * A restore is resolved by `onRestore`, which returns the view to continue from.
 * @internal
 */
export const step = (
  view: View,
  e: TapeEvent,
  ranks: Ranks,
  onRestore: (e: TapeEventOf<"CheckpointRestored">) => View
): View => {
  switch (e._tag) {
    case "UserMessage":
      view.steps.push({
        kind: "user",
        sessionId: e.sessionId,
        seq: e.tapeSeq,
        key: ranks.key(e.sessionId, e.tapeSeq),
        message: { role: "user", text: e.text },
        calls: [],
        tokens: undefined,
        attachmentTokens: (e.attachments ?? []).reduce((n, a) => n + attachmentTokens(a), 0)
      })
      return view
    case "AssistantMessage":
      view.steps.push({
        kind: "assistant",
        sessionId: e.sessionId,
        seq: e.tapeSeq,
        key: ranks.key(e.sessionId, e.tapeSeq),
        message: { role: "assistant", text: e.text, toolCalls: [] },
        calls: [],
        tokens: undefined,
        attachmentTokens: 0
      })
      return view
    case "ToolProposed": {
      const last = view.steps.at(-1)
      if (last === undefined || last.kind !== "assistant") return view
      const m = last.message as AssistantMessage
      const call: Call = {
        id: e.toolCallId,
        name: e.tool,
        args: e.args,
        owner: last,
        result: undefined,
        resultKey: Number.POSITIVE_INFINITY,
        placeholder: undefined
      }
      // Messages handed out are never mutated: a new call makes a new message.
      last.message = {
        role: "assistant",
        text: m.text,
        toolCalls: [...m.toolCalls, { id: e.toolCallId, name: e.tool, args: e.args }]
      }
      last.calls.push(call)
      last.tokens = undefined
      view.calls.set(call.id, call)
      return view
    }
    case "ToolResult": {
      view.openApprovals.delete(e.toolCallId)
      const call = view.calls.get(e.toolCallId)
      if (call === undefined) return view
      call.result = resultMessage(e)
      call.resultKey = ranks.key(e.sessionId, e.tapeSeq)
      call.owner.tokens = undefined
      return view
    }
    case "ApprovalRequested":
      if (view.calls.get(e.toolCallId)?.result === undefined) view.openApprovals.add(e.toolCallId)
      return view
    case "ApprovalResolved":
      view.openApprovals.delete(e.toolCallId)
      return view
    case "SessionNote":
      if (!BOOKKEEPING.has(e.author)) view.notes.push({ key: ranks.key(e.sessionId, e.tapeSeq), event: e })
      return view
    case "ModelRequest":
      view.turnsSinceMarker++
      return view
    case "CompactionApplied":
      applyCompaction(view, e, ranks)
      return view
    case "CheckpointRestored": {
      const base = onRestore(e)
      base.turnsSinceMarker = 0
      base.restoreKey = ranks.key(e.sessionId, e.tapeSeq)
      return base
    }
    default:
      return view
  }
}

/** Index of the first history event after `(sessionId, seq)`, scanning back from `from`. */
const endOf = (history: ReadonlyArray<TapeEvent>, from: number, ranks: Ranks, sessionId: SessionId, seq: number) => {
  const limit = ranks.key(sessionId, seq)
  let i = from
  while (i > 0 && ranks.key(history[i - 1]!.sessionId, history[i - 1]!.tapeSeq) > limit) i--
  return i
}

const isMarker = (e: TapeEvent) => e._tag === "CompactionApplied" || e._tag === "CheckpointRestored"

const foldRange = (view: View, history: ReadonlyArray<TapeEvent>, from: number, to: number, ranks: Ranks) => {
  let v = view
  for (let i = from; i < to; i++) {
    v = step(v, history[i]!, ranks, (r) => build(history, endOf(history, i, ranks, r.sessionId, r.restoredSeq), ranks))
  }
  return v
}

/**
 * The view of `history[0..end)`. Scans back to the last compaction or restore and folds only from
 * there: a compaction's view is its summary plus the steps after what it covers; a restore's is the
 * view at its restored point plus what follows it.
 * @internal
 */
export const build = (history: ReadonlyArray<TapeEvent>, end: number, ranks: Ranks): View => {
  let i = end - 1
  while (i >= 0 && !isMarker(history[i]!)) i--
  if (i < 0) return foldRange(empty(), history, 0, end, ranks)
  const marker = history[i]!
  if (marker._tag === "CheckpointRestored") {
    const base = build(history, endOf(history, i, ranks, marker.sessionId, marker.restoredSeq), ranks)
    base.turnsSinceMarker = 0
    base.restoreKey = ranks.key(marker.sessionId, marker.tapeSeq)
    return foldRange(base, history, i + 1, end, ranks)
  }
  if (marker._tag !== "CompactionApplied") return foldRange(empty(), history, 0, end, ranks)
  const start = endOf(history, i, ranks, marker.sessionId, marker.toSeq)
  // By construction a compaction covers the last restore before it; a tape that breaks this is
  // folded from the start instead.
  for (let k = start; k < i; k++) {
    if (history[k]!._tag === "CheckpointRestored") return foldRange(empty(), history, 0, end, ranks)
  }
  const view = empty()
  for (let k = start; k < i; k++) {
    const e = history[k]!
    if (!isMarker(e)) step(view, e, ranks, () => view)
  }
  applyCompaction(view, marker, ranks)
  return foldRange(view, history, i + 1, end, ranks)
}

const placeholder = (call: Call): ToolMessage => {
  if (call.placeholder === undefined) {
    call.placeholder = { role: "tool", toolCallId: call.id, name: call.name, output: NO_RESULT, isError: true }
  }
  return call.placeholder
}

/** The messages of a view, in prompt order. @internal */
export const render = (view: View): Array<PromptMessage> => {
  const out: Array<PromptMessage> = []
  if (view.summary) out.push(view.summary.message)
  for (const s of view.steps) {
    out.push(s.message)
    for (const c of s.calls) out.push(c.result ?? placeholder(c))
  }
  return out
}

/** Tokens of one step (its message, results and placeholders), cached until it changes. @internal */
export const stepTokens = (counter: Counter, s: Step): number => {
  if (s.tokens === undefined) {
    let n = messageTokens(counter, s.message) + s.attachmentTokens
    for (const c of s.calls) n += messageTokens(counter, c.result ?? placeholder(c))
    s.tokens = n
  }
  return s.tokens
}

/** Tokens of the view's attachments (counted by `viewTokens`, added to the prompt by the kernel). @internal */
export const viewAttachmentTokens = (view: View): number => {
  let n = 0
  for (const s of view.steps) n += s.attachmentTokens
  return n
}

/** Tokens of the view's messages (cached per step and per summary). @internal */
export const viewTokens = (counter: Counter, view: View): number => {
  let n = 0
  if (view.summary) {
    if (view.summary.tokens === undefined) view.summary.tokens = messageTokens(counter, view.summary.message)
    n += view.summary.tokens
  }
  for (const s of view.steps) n += stepTokens(counter, s)
  return n
}

/** Where a compaction cuts: `steps[index]` is the first step kept; the tape up to `toSeq` is covered. @internal */
export interface Cut {
  readonly index: number
  readonly toSeq: number
}

/** @internal */
export interface CutOptions {
  readonly sessionId: SessionId
  /** Keep at least this many of the last user turns, when they fit `keepTokens`. */
  readonly keepTurns: number
  /** Most tokens the kept steps may use (the last step is always kept). */
  readonly keepTokens: number
  readonly tokensOf: (s: Step) => number
}

/**
 * The cut points that never separate a tool call from its result: every call before the cut has its
 * result before the cut too (calls without a result are open work, and stay after it), the first
 * kept step is the session's own, after its last restore, and the last step is always kept.
 * @internal
 */
export const validCuts = (view: View, sessionId: SessionId): Array<number> => {
  const out: Array<number> = []
  let closedUpTo = Number.NEGATIVE_INFINITY // the latest result key among the steps before i
  let allClosed = true
  for (let i = 0; i < view.steps.length; i++) {
    const s = view.steps[i]!
    if (i > 0 && allClosed && s.sessionId === sessionId && s.key > view.restoreKey && closedUpTo < s.key) out.push(i)
    for (const c of s.calls) {
      if (c.result === undefined) allClosed = false
      else closedUpTo = Math.max(closedUpTo, c.resultKey)
    }
  }
  return out
}

/**
 * Choose the cut: keep the last `keepTurns` user turns if they fit `keepTokens`, otherwise as many of
 * the last steps as fit (at least one). `undefined` when nothing can be covered.
 * @internal
 */
export const planCut = (view: View, o: CutOptions): Cut | undefined => {
  const cuts = validCuts(view, o.sessionId)
  if (cuts.length === 0) return undefined
  const n = view.steps.length
  const suffix = new Array<number>(n + 1).fill(0)
  for (let i = n - 1; i >= 0; i--) suffix[i] = suffix[i + 1]! + o.tokensOf(view.steps[i]!)
  let turnStart = 0
  let turns = 0
  for (let i = n - 1; i >= 0 && turns < o.keepTurns; i--) {
    if (view.steps[i]!.kind === "user") {
      turns++
      turnStart = i
    }
  }
  const fits = cuts.filter((i) => i >= turnStart && suffix[i]! <= o.keepTokens)
  const index = fits[0] ?? cuts.at(-1)!
  const first = view.steps[index]!
  return { index, toSeq: first.seq - 1 }
}
