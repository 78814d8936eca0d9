/** Runs: state, duration, tokens (from each session's tape), and cancel for runs still going. */
import { useSignal } from "@preact/signals"
import { useEffect } from "preact/hooks"
import { api, duration, messageOf, type Run, shortId, time } from "../api.js"
import { href } from "../router.js"

const TERMINAL: ReadonlySet<Run["state"]> = new Set<Run["state"]>(["Done", "Failed", "Cancelled"])

export const Runs = () => {
  const runs = useSignal<ReadonlyArray<Run> | null>(null)
  const tokens = useSignal<Record<string, number>>({})
  const error = useSignal<string | null>(null)
  const load = async () => {
    const { data, error: failed } = await api.GET("/v1/runs", {})
    if (!data) {
      error.value = messageOf(failed)
      return
    }
    const newest = [...data].reverse().slice(0, 100)
    runs.value = newest
    const counts: Record<string, number> = {}
    const sessions = [...new Set(newest.map((r) => r.sessionId))].slice(0, 20)
    await Promise.all(
      sessions.map(async (id) => {
        const { data: events } = await api.GET("/v1/sessions/{id}/tape", {
          params: { path: { id }, query: { limit: 5000 } }
        })
        for (const e of events ?? [])
          if (e._tag === "Usage" && e.runId) counts[e.runId] = (counts[e.runId] ?? 0) + e.inputTokens + e.outputTokens
      })
    )
    tokens.value = counts
  }
  useEffect(() => {
    let timer: ReturnType<typeof setTimeout> | undefined
    let stopped = false
    const tick = async () => {
      await load()
      // Refresh while something is still running.
      if (!stopped && (runs.value ?? []).some((r) => !TERMINAL.has(r.state))) timer = setTimeout(tick, 2000)
    }
    void tick()
    return () => {
      stopped = true
      clearTimeout(timer)
    }
  }, [])
  const cancel = async (id: string) => {
    const { error: failed } = await api.POST("/v1/runs/{id}/cancel", { params: { path: { id } } })
    if (failed) error.value = messageOf(failed)
    await load()
  }
  return (
    <section>
      <h1 tabIndex={-1}>Runs</h1>
      {error.value && (
        <p class="error" role="alert">
          {error.value}
        </p>
      )}
      {runs.value === null ? (
        <p>Loading…</p>
      ) : runs.value.length === 0 ? (
        <p>No runs yet.</p>
      ) : (
        <div class="table-wrap">
          <table>
            <thead>
              <tr>
                <th scope="col">Run</th>
                <th scope="col">Session</th>
                <th scope="col">State</th>
                <th scope="col">Started</th>
                <th scope="col">Duration</th>
                <th scope="col">Tokens</th>
                <th scope="col">
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {runs.value.map((r) => {
                const live = !TERMINAL.has(r.state)
                return (
                  <tr key={r.id}>
                    <td>
                      <code title={r.input}>{shortId(r.id)}</code>
                    </td>
                    <td>
                      <a href={href("sessions", r.sessionId)}>{shortId(r.sessionId)}</a>
                    </td>
                    <td>
                      <span class={`badge state-${r.state}`}>{r.state}</span>
                    </td>
                    <td>{time(r.createdAt)}</td>
                    <td>{duration((live ? Date.now() : r.updatedAt) - r.createdAt)}</td>
                    <td>{tokens.value[r.id] ?? 0}</td>
                    <td>
                      {live && (
                        <button type="button" class="danger small" onClick={() => cancel(r.id)}>
                          Cancel<span class="sr-only"> run {shortId(r.id)}</span>
                        </button>
                      )}
                    </td>
                  </tr>
                )
              })}
            </tbody>
          </table>
        </div>
      )}
    </section>
  )
}
