/** The approvals inbox, live: new approvals appear and answered ones leave without a reload. */
import { useSignal } from "@preact/signals"
import { useEffect, useRef } from "preact/hooks"
import { type ApprovalRecord, api, messageOf, shortId, type TapeEventOf, time } from "../api.js"
import { useEventSource } from "../live.js"
import { href } from "../router.js"

interface Context {
  readonly args?: unknown
  readonly reasons: ReadonlyArray<string>
  readonly decision?: string
}

const useCallContext = (approval: ApprovalRecord) => {
  const context = useSignal<Context | null>(null)
  useEffect(() => {
    api
      .GET("/v1/sessions/{id}/tape", { params: { path: { id: approval.sessionId }, query: { limit: 5000 } } })
      .then(({ data }) => {
        const events = data ?? []
        const proposed = events.find(
          (e): e is TapeEventOf<"ToolProposed"> => e._tag === "ToolProposed" && e.toolCallId === approval.toolCallId
        )
        const policy = events.find(
          (e): e is TapeEventOf<"PolicyDecided"> => e._tag === "PolicyDecided" && e.toolCallId === approval.toolCallId
        )
        context.value = {
          args: proposed?.args,
          reasons: policy?.reasons ?? [],
          ...(policy ? { decision: policy.decision } : {})
        }
      })
  }, [approval.id])
  return context
}

const EXPIRY = [
  ["", "never"],
  ["3600", "1 hour"],
  ["86400", "1 day"],
  ["604800", "7 days"]
] as const

const Card = ({
  approval,
  onDone,
  onStale
}: {
  approval: ApprovalRecord
  onDone: (id: string) => void
  onStale: () => void
}) => {
  const context = useCallContext(approval)
  const error = useSignal<string | null>(null)
  const busy = useSignal(false)
  const expires = useSignal("")
  const maxUses = useSignal("")
  const resolve = async (decision: "approve" | "deny", scope: "once" | "session" | "always") => {
    busy.value = true
    error.value = null
    const grant =
      decision === "approve" && scope !== "once"
        ? {
            ...(expires.value ? { expiresInSeconds: Number(expires.value) } : {}),
            ...(maxUses.value ? { maxUses: Number(maxUses.value) } : {})
          }
        : {}
    const {
      data,
      error: failed,
      response
    } = await api.POST("/v1/approvals/{id}", {
      params: { path: { id: approval.id } },
      body: { decision, scope, ...grant }
    })
    busy.value = false
    if (data) onDone(approval.id)
    else {
      error.value = messageOf(failed)
      // Answered or expired meanwhile (say, its run was cancelled): show the inbox as it is now.
      if (response.status === 409 || response.status === 404) onStale()
    }
  }
  const headingId = `approval-${approval.id}`
  return (
    <article class="card" aria-labelledby={headingId}>
      <h2 id={headingId}>
        <code>{approval.tool}</code> <span class={`risk risk-${approval.risk}`}>{approval.risk} risk</span>
      </h2>
      <p>{approval.summary}</p>
      <dl>
        <dt>Arguments</dt>
        <dd>
          <pre>{context.value ? JSON.stringify(context.value.args ?? null, null, 2) : "…"}</pre>
        </dd>
        <dt>Policy</dt>
        <dd>
          {context.value?.decision ?? "…"}
          {context.value && context.value.reasons.length > 0 && (
            <ul>
              {context.value.reasons.map((r) => (
                <li key={r}>{r}</li>
              ))}
            </ul>
          )}
        </dd>
        <dt>Session</dt>
        <dd>
          <a href={href("sessions", approval.sessionId)}>{shortId(approval.sessionId)}</a> · {approval.principal}
        </dd>
        <dt>Run</dt>
        <dd>
          <code>{shortId(approval.runId)}</code>
        </dd>
        <dt>Expires</dt>
        <dd>{time(approval.expiresAt)}</dd>
      </dl>
      <details>
        <summary>Limits for a standing grant</summary>
        <div class="row">
          <label>
            Expires after{" "}
            <select value={expires.value} onChange={(e) => (expires.value = e.currentTarget.value)}>
              {EXPIRY.map(([v, label]) => (
                <option key={v} value={v}>
                  {label}
                </option>
              ))}
            </select>
          </label>
          <label>
            Uses at most{" "}
            <input
              type="number"
              min="1"
              inputMode="numeric"
              placeholder="unlimited"
              value={maxUses.value}
              onInput={(e) => (maxUses.value = e.currentTarget.value)}
            />
          </label>
        </div>
      </details>
      <div class="actions">
        <button type="button" disabled={busy.value} onClick={() => resolve("approve", "once")}>
          Approve once
        </button>
        <button type="button" class="secondary" disabled={busy.value} onClick={() => resolve("approve", "session")}>
          Approve for the session
        </button>
        <button type="button" class="secondary" disabled={busy.value} onClick={() => resolve("approve", "always")}>
          Always approve
        </button>
        <button type="button" class="danger" disabled={busy.value} onClick={() => resolve("deny", "once")}>
          Deny
        </button>
      </div>
      {error.value && (
        <p class="error" role="alert">
          {error.value}
        </p>
      )}
    </article>
  )
}

export const Approvals = () => {
  const pending = useSignal<ReadonlyArray<ApprovalRecord> | null>(null)
  const error = useSignal<string | null>(null)
  // What the live events said while a reload's list was on its way (a record, or null once resolved):
  // the list is a snapshot from before them, so it must not undo them.
  const during = useRef<Map<string, ApprovalRecord | null> | null>(null)
  const reload = async () => {
    const seen = new Map<string, ApprovalRecord | null>()
    during.current = seen
    const { data, error: failed } = await api.GET("/v1/approvals", { params: { query: { status: "pending" } } })
    if (during.current === seen) during.current = null
    if (!data) {
      error.value = messageOf(failed)
      return
    }
    const list = data.filter((a) => seen.get(a.id) !== null)
    for (const record of seen.values()) if (record !== null && !list.some((a) => a.id === record.id)) list.push(record)
    pending.value = list
  }
  const remove = (id: string) => {
    during.current?.set(id, null)
    pending.value = (pending.value ?? []).filter((a) => a.id !== id)
  }
  useEventSource(
    "/v1/approvals/events",
    {
      ready: () => void reload(),
      requested: (e) => {
        const record = JSON.parse(e.data) as ApprovalRecord
        during.current?.set(record.id, record)
        const list = pending.value ?? []
        if (!list.some((a) => a.id === record.id)) pending.value = [...list, record]
      },
      resolved: (e) => remove((JSON.parse(e.data) as ApprovalRecord).id)
    },
    []
  )
  const list = pending.value
  return (
    <section>
      <h1 tabIndex={-1}>Approvals</h1>
      <p class="lede" aria-live="polite">
        {list === null ? "Loading…" : list.length === 0 ? "Nothing is waiting for you." : `${list.length} waiting`}
      </p>
      {error.value && (
        <p class="error" role="alert">
          {error.value}
        </p>
      )}
      <div class="cards">
        {(list ?? []).map((a) => (
          <Card approval={a} key={a.id} onDone={remove} onStale={reload} />
        ))}
      </div>
    </section>
  )
}
