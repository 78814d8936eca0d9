/** Watchdog incidents (operators): open or all, refreshed every few seconds. */
import { useSignal } from "@preact/signals"
import { api, time } from "../api.js"
import { href } from "../router.js"
import { Failure, useList } from "./common.js"

const REFRESH_MS = 3000

export const Incidents = () => {
  const open = useSignal(true)
  const { rows, error } = useList(
    () => api.GET("/v1/incidents", { params: { query: { open: open.value ? "true" : "false", limit: 200 } } }),
    [open.value],
    REFRESH_MS
  )
  return (
    <section>
      <h1 tabIndex={-1}>Incidents</h1>
      <div class="filters">
        <label>
          <input type="checkbox" checked={open.value} onChange={(e) => (open.value = e.currentTarget.checked)} /> Open
          only
        </label>
      </div>
      <Failure error={error} />
      <p class="lede" aria-live="polite">
        {rows.value === null
          ? "Loading…"
          : rows.value.length === 0
            ? open.value
              ? "No open incidents."
              : "No incidents."
            : `${rows.value.length} ${open.value ? "open" : "in all"}`}
      </p>
      <div class="cards">
        {(rows.value ?? []).map((i) => (
          <article class="card" key={i.id} aria-labelledby={`incident-${i.id}`}>
            <h2 id={`incident-${i.id}`}>
              <span class={`badge incident-${i.state}`}>{i.state}</span> {i.kind}
            </h2>
            <dl>
              <dt>Subject</dt>
              <dd>
                {i.sessionId ? <a href={href("sessions", i.sessionId)}>{i.subject}</a> : <code>{i.subject}</code>}
              </dd>
              <dt>Detail</dt>
              <dd>{i.detail}</dd>
              <dt>Action</dt>
              <dd>{i.action}</dd>
              <dt>Opened</dt>
              <dd>
                {time(i.openedAt)}
                {i.resolvedAt ? ` · resolved ${time(i.resolvedAt)}` : ""}
              </dd>
            </dl>
          </article>
        ))}
      </div>
    </section>
  )
}
