/** Background tasks (operators): by state and kind, newest first; cancel one that has not ended. */
import { useSignal } from "@preact/signals"
import { api, type Schemas, shortId, time } from "../api.js"
import { act, Failure, useList } from "./common.js"

type Task = Schemas["Task"]
const STATES: ReadonlyArray<Task["state"]> = ["queued", "running", "succeeded", "failed", "cancelled", "expired"]
const isTaskState = (s: string): s is Task["state"] => (STATES as ReadonlyArray<string>).includes(s)

export const Tasks = () => {
  const state = useSignal("")
  const kind = useSignal("")
  const { rows, error, reload } = useList(
    () =>
      api.GET("/v1/tasks", {
        params: {
          query: {
            ...(isTaskState(state.value) ? { state: state.value } : {}),
            ...(kind.value.trim() ? { kind: kind.value.trim() } : {}),
            limit: 200
          }
        }
      }),
    [state.value, kind.value],
    5000
  )
  const run = act(error, reload)
  return (
    <section>
      <h1 tabIndex={-1}>Tasks</h1>
      <div class="filters">
        <label>
          State{" "}
          <select value={state.value} onChange={(e) => (state.value = e.currentTarget.value)}>
            <option value="">any</option>
            {STATES.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </label>
        <label>
          Kind{" "}
          <input
            value={kind.value}
            placeholder="e.g. memory.reflect"
            onChange={(e) => (kind.value = e.currentTarget.value)}
          />
        </label>
      </div>
      <Failure error={error} />
      {rows.value === null ? (
        <p>Loading…</p>
      ) : rows.value.length === 0 ? (
        <p>No tasks.</p>
      ) : (
        <div class="table-wrap">
          <table>
            <thead>
              <tr>
                <th scope="col">Task</th>
                <th scope="col">Kind</th>
                <th scope="col">State</th>
                <th scope="col">Attempts</th>
                <th scope="col">Created</th>
                <th scope="col">Last error</th>
                <th scope="col">
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {rows.value.map((t) => (
                <tr key={t.id}>
                  <td>
                    <code>{shortId(t.id)}</code>
                  </td>
                  <td>{t.kind}</td>
                  <td>
                    <span class={`badge task-${t.state}`}>{t.state}</span>
                  </td>
                  <td>
                    {t.attempts} of {t.maxAttempts}
                  </td>
                  <td>{time(t.createdAt)}</td>
                  <td>{t.lastError ?? ""}</td>
                  <td>
                    {(t.state === "queued" || t.state === "running") && (
                      <button
                        type="button"
                        class="danger small"
                        onClick={() => run(() => api.POST("/v1/tasks/{id}/cancel", { params: { path: { id: t.id } } }))}
                      >
                        Cancel<span class="sr-only"> task {shortId(t.id)}</span>
                      </button>
                    )}
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
