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
      {rows.value !== null && rows.value.length > 0 && (
        <div class="table-wrap">
          <table>
            <thead>
              <tr>
                <th scope="col">Opened</th>
                <th scope="col">Kind</th>
                <th scope="col">Subject</th>
                <th scope="col">Detail</th>
                <th scope="col">Action</th>
                <th scope="col">State</th>
              </tr>
            </thead>
            <tbody>
              {rows.value.map((i) => (
                <tr key={i.id}>
                  <td>{time(i.openedAt)}</td>
                  <td>{i.kind}</td>
                  <td>
                    {i.sessionId ? <a href={href("sessions", i.sessionId)}>{i.subject}</a> : <code>{i.subject}</code>}
                  </td>
                  <td>{i.detail}</td>
                  <td>{i.action}</td>
                  <td>
                    <span class={`badge incident-${i.state}`}>{i.state}</span>
                    {i.resolvedAt ? <span class="muted"> {time(i.resolvedAt)}</span> : null}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  )
}
