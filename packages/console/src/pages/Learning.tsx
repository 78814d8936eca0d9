/**
 * Learning candidates: what reflection proposed to remember but was not sure enough to save
 * (pending), with kind, text, confidence and the run it came from; accept (it is written to memory)
 * or reject with an optional reason. Operators see every principal's.
 */
import { useSignal } from "@preact/signals"
import { useEffect } from "preact/hooks"
import { api, messageOf, type Schemas, shortId, time } from "../api.js"
import { href } from "../router.js"
import { Failure, percent, useList } from "./common.js"

type Candidate = Schemas["LearningCandidate"]
type Status = Candidate["status"]

const Card = ({ candidate: c, onDone }: { candidate: Candidate; onDone: () => Promise<void> }) => {
  const reason = useSignal("")
  const error = useSignal<string | null>(null)
  const busy = useSignal(false)
  const decide = async (call: () => Promise<{ error?: unknown }>) => {
    busy.value = true
    const { error: failed } = await call()
    busy.value = false
    if (failed !== undefined) error.value = messageOf(failed)
    await onDone()
  }
  // Candidates are kept per principal (no session): the run they came from says where to look.
  const session = useSignal<string | null>(c.sessionId)
  useEffect(() => {
    if (c.sessionId !== null || c.sourceRunId === null) return
    api.GET("/v1/runs/{id}", { params: { path: { id: c.sourceRunId } } }).then(({ data }) => {
      if (data) session.value = data.sessionId
    })
  }, [c.id])
  const path = { params: { path: { id: c.id } } }
  return (
    <article class="card" aria-labelledby={`cand-${c.id}`}>
      <h2 id={`cand-${c.id}`}>
        <span class="badge">{c.kind}</span> {c.text}
      </h2>
      <dl>
        <dt>Confidence</dt>
        <dd>{percent(c.confidenceBps)}</dd>
        <dt>Principal</dt>
        <dd>{c.principal}</dd>
        <dt>From</dt>
        <dd>
          {session.value ? (
            <a href={href("sessions", session.value)}>run {c.sourceRunId ? shortId(c.sourceRunId) : "(unknown)"}</a>
          ) : (
            <code>{c.sourceRunId ? shortId(c.sourceRunId) : "(unknown)"}</code>
          )}{" "}
          · {time(c.createdAt)}
        </dd>
        {c.status !== "pending" && (
          <>
            <dt>Decided</dt>
            <dd>
              <span class="badge">{c.status}</span> by {c.decidedBy ?? "?"}
              {c.decidedAt ? ` at ${time(c.decidedAt)}` : ""}
              {c.reason ? ` · ${c.reason}` : ""}
            </dd>
          </>
        )}
      </dl>
      {c.status === "pending" && (
        <div class="actions">
          <button
            type="button"
            disabled={busy.value}
            onClick={() => decide(() => api.POST("/v1/learning/candidates/{id}/accept", path))}
          >
            Accept
          </button>
          <label>
            Reason{" "}
            <input
              maxLength={500}
              placeholder="optional"
              value={reason.value}
              onInput={(e) => (reason.value = e.currentTarget.value)}
            />
          </label>
          <button
            type="button"
            class="danger"
            disabled={busy.value}
            onClick={() =>
              decide(() =>
                api.POST("/v1/learning/candidates/{id}/reject", {
                  ...path,
                  body: reason.value.trim() ? { reason: reason.value.trim() } : {}
                })
              )
            }
          >
            Reject
          </button>
        </div>
      )}
      <Failure error={error} />
    </article>
  )
}

export const Learning = () => {
  const status = useSignal<Status>("pending")
  const { rows, error, reload } = useList(
    () => api.GET("/v1/learning/candidates", { params: { query: { status: status.value } } }),
    [status.value]
  )
  return (
    <section>
      <h1 tabIndex={-1}>Learning</h1>
      <div class="filters">
        <label>
          Show{" "}
          <select value={status.value} onChange={(e) => (status.value = e.currentTarget.value as Status)}>
            <option value="pending">pending</option>
            <option value="accepted">accepted</option>
            <option value="rejected">rejected</option>
          </select>
        </label>
      </div>
      <Failure error={error} />
      <p class="lede" aria-live="polite">
        {rows.value === null
          ? "Loading…"
          : rows.value.length === 0
            ? `No ${status.value} candidates.`
            : `${rows.value.length} ${status.value}`}
      </p>
      <div class="cards">
        {(rows.value ?? []).map((c) => (
          <Card candidate={c} key={c.id} onDone={reload} />
        ))}
      </div>
    </section>
  )
}
