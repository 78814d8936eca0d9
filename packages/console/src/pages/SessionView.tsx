/**
 * One session's conversation, rendered from its live tape (`GET /v1/sessions/:id/events`, resumed
 * with `Last-Event-ID` by `EventSource` after a dropped connection): messages, streamed text, tool
 * calls with their policy decision, approval and result, compactions and errors. A message can be
 * sent into the session.
 */
import { useSignal } from "@preact/signals"
import { useEffect } from "preact/hooks"
import { api, messageOf, type Session, shortId, type TapeEvent, type TapeEventOf, time } from "../api.js"
import { connected, useEventSource } from "../live.js"
import { href } from "../router.js"

type Item =
  | { readonly kind: "user"; readonly seq: number; readonly text: string }
  | { readonly kind: "assistant"; readonly seq: number; readonly key: string; text: string; done: boolean }
  | {
      readonly kind: "tool"
      readonly seq: number
      readonly id: string
      readonly proposed: TapeEventOf<"ToolProposed">
      policy?: TapeEventOf<"PolicyDecided">
      requested?: TapeEventOf<"ApprovalRequested">
      resolved?: TapeEventOf<"ApprovalResolved">
      result?: TapeEventOf<"ToolResult">
    }
  | { readonly kind: "note"; readonly seq: number; readonly text: string; readonly tone: "info" | "error" }

interface Tape {
  readonly items: Array<Item>
  lastSeq: number
  tokens: number
}

/** Fold one event into the rendered conversation (events arrive once each, in tape order). */
const fold = (tape: Tape, e: TapeEvent): void => {
  if (e.tapeSeq <= tape.lastSeq) return
  tape.lastSeq = e.tapeSeq
  const tool = (id: string) =>
    tape.items.find((i): i is Extract<Item, { kind: "tool" }> => i.kind === "tool" && i.id === id)
  const seq = e.tapeSeq
  switch (e._tag) {
    case "UserMessage":
      tape.items.push({ kind: "user", seq, text: e.text })
      return
    case "AssistantDelta":
    case "AssistantMessage": {
      const key = `${e.runId}:${e.turn}`
      const open = tape.items.find(
        (i): i is Extract<Item, { kind: "assistant" }> => i.kind === "assistant" && i.key === key
      )
      if (e._tag === "AssistantDelta") {
        if (open) open.text += e.text
        else tape.items.push({ kind: "assistant", seq, key, text: e.text, done: false })
      } else if (open) {
        open.text = e.text
        open.done = true
      } else if (e.text !== "") tape.items.push({ kind: "assistant", seq, key, text: e.text, done: true })
      return
    }
    case "ToolProposed":
      tape.items.push({ kind: "tool", seq, id: e.toolCallId, proposed: e })
      return
    case "PolicyDecided": {
      const t = tool(e.toolCallId)
      if (t) t.policy = e
      return
    }
    case "ApprovalRequested": {
      const t = tool(e.toolCallId)
      if (t) t.requested = e
      return
    }
    case "ApprovalResolved": {
      const t = tool(e.toolCallId)
      if (t) t.resolved = e
      return
    }
    case "ToolResult": {
      const t = tool(e.toolCallId)
      if (t) t.result = e
      return
    }
    case "CompactionApplied":
      tape.items.push({
        kind: "note",
        seq,
        tone: "info",
        text: `Compacted: history up to #${e.toSeq} summarised (${e.tokensBefore} → ${e.tokensAfter} tokens)`
      })
      return
    case "RunError":
      tape.items.push({ kind: "note", seq, tone: "error", text: `Run failed (${e.code}): ${e.message}` })
      return
    case "RunStateChanged":
      if (e.to === "Cancelled" || e.to === "Failed")
        tape.items.push({
          kind: "note",
          seq,
          tone: e.to === "Failed" ? "error" : "info",
          text: `Run ${e.to.toLowerCase()}`
        })
      return
    case "Usage":
      tape.tokens += e.inputTokens + e.outputTokens
      return
    default:
      return
  }
}

const ToolCall = ({ item }: { item: Extract<Item, { kind: "tool" }> }) => (
  <li class="tool" data-seq={item.seq}>
    <p>
      Tool call <code>{item.proposed.tool}</code>
      {item.policy && <span class={`badge decision-${item.policy.decision}`}>policy: {item.policy.decision}</span>}
      {item.resolved && (
        <span class={`badge approval-${item.resolved.decision}`}>
          {item.resolved.decision} by {item.resolved.by}
        </span>
      )}
      {item.requested && !item.resolved && <span class="badge approval-pending">waiting for approval</span>}
    </p>
    <pre>{JSON.stringify(item.proposed.args, null, 2)}</pre>
    {item.policy && item.policy.reasons.length > 0 && <p class="muted">{item.policy.reasons.join("; ")}</p>}
    {item.result && (
      <div class="result">
        <p>
          Result: <span class={`badge result-${item.result.status}`}>{item.result.status}</span>{" "}
          <span class="muted">{item.result.durationMs} ms</span>
        </p>
        <pre>{item.result.output}</pre>
      </div>
    )}
  </li>
)

export const SessionView = ({ id }: { id: string }) => {
  const info = useSignal<Session | null>(null)
  const error = useSignal<string | null>(null)
  const version = useSignal(0)
  const sending = useSignal(false)
  const tape = useSignal<Tape>({ items: [], lastSeq: 0, tokens: 0 })
  useEffect(() => {
    api.GET("/v1/sessions/{id}", { params: { path: { id } } }).then(({ data, error: failed }) => {
      if (data) info.value = data
      else error.value = messageOf(failed)
    })
  }, [id])
  const onEvent = (e: MessageEvent<string>) => {
    fold(tape.value, JSON.parse(e.data) as TapeEvent)
    version.value++
  }
  const tags = [
    "UserMessage",
    "AssistantDelta",
    "AssistantMessage",
    "ToolProposed",
    "PolicyDecided",
    "ApprovalRequested",
    "ApprovalResolved",
    "ToolResult",
    "CompactionApplied",
    "RunError",
    "RunStateChanged",
    "Usage"
  ]
  useEventSource(`/v1/sessions/${encodeURIComponent(id)}/events`, Object.fromEntries(tags.map((t) => [t, onEvent])), [
    id
  ])
  const send = async (event: Event) => {
    event.preventDefault()
    const form = event.currentTarget as HTMLFormElement
    const input = form.elements.namedItem("message") as HTMLTextAreaElement
    if (input.value.trim() === "") return
    sending.value = true
    const { error: failed } = await api.POST("/v1/runs", { body: { text: input.value, sessionId: id } })
    sending.value = false
    if (failed) error.value = messageOf(failed)
    else input.value = ""
  }
  void version.value
  const s = info.value
  return (
    <section>
      <p class="crumbs">
        <a href={href("sessions")}>Sessions</a> /
      </p>
      <h1 tabIndex={-1}>{s ? (s.title ?? s.key ?? shortId(s.id)) : "Session"}</h1>
      {s && (
        <p class="muted">
          {s.principal} · agent {s.agentId ?? "default"} · {tape.value.tokens || s.tokensUsed} tokens · started{" "}
          {time(s.createdAt)} {connected.value ? "" : "· reconnecting…"}
        </p>
      )}
      {error.value && (
        <p class="error" role="alert">
          {error.value}
        </p>
      )}
      <ol class="tape" aria-label="Conversation" aria-live="polite">
        {tape.value.items.map((item) =>
          item.kind === "user" ? (
            <li class="msg user" key={item.seq} data-seq={item.seq}>
              <span class="who">user</span>
              <p>{item.text}</p>
            </li>
          ) : item.kind === "assistant" ? (
            <li class="msg assistant" key={item.seq} data-seq={item.seq} aria-busy={item.done ? undefined : true}>
              <span class="who">assistant</span>
              <p>{item.text}</p>
            </li>
          ) : item.kind === "tool" ? (
            <ToolCall item={item} key={item.seq} />
          ) : (
            <li class={`note ${item.tone}`} key={item.seq} data-seq={item.seq}>
              {item.text}
            </li>
          )
        )}
      </ol>
      <form class="composer" onSubmit={send}>
        <label for="message">Message</label>
        <textarea id="message" name="message" rows={2} required />
        <button type="submit" disabled={sending.value}>
          Send
        </button>
      </form>
    </section>
  )
}
