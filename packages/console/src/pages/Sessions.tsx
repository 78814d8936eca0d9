/** Sessions: search, and narrow by principal and agent. */
import { useComputed, useSignal } from "@preact/signals"
import { useEffect } from "preact/hooks"
import { api, messageOf, type Session, shortId, time } from "../api.js"
import { href } from "../router.js"

export const Sessions = () => {
  const all = useSignal<ReadonlyArray<Session> | null>(null)
  const error = useSignal<string | null>(null)
  const query = useSignal("")
  const principal = useSignal("")
  const agent = useSignal("")
  useEffect(() => {
    api.GET("/v1/sessions", { params: { query: { limit: 1000 } } }).then(({ data, error: failed }) => {
      if (data) all.value = [...data].sort((a, b) => b.updatedAt - a.updatedAt)
      else error.value = messageOf(failed)
    })
  }, [])
  const principals = useComputed(() => [...new Set((all.value ?? []).map((s) => s.principal))].sort())
  const agents = useComputed(() => [...new Set((all.value ?? []).map((s) => s.agentId ?? "default"))].sort())
  const shown = useComputed(() => {
    const q = query.value.trim().toLowerCase()
    return (all.value ?? []).filter(
      (s) =>
        (principal.value === "" || s.principal === principal.value) &&
        (agent.value === "" || (s.agentId ?? "default") === agent.value) &&
        (q === "" || [s.id, s.title, s.key, s.channel].some((f) => f?.toLowerCase().includes(q)))
    )
  })
  return (
    <section>
      <h1 tabIndex={-1}>Sessions</h1>
      <search class="filters">
        <label>
          Search <input type="search" value={query.value} onInput={(e) => (query.value = e.currentTarget.value)} />
        </label>
        <label>
          Principal{" "}
          <select value={principal.value} onChange={(e) => (principal.value = e.currentTarget.value)}>
            <option value="">all</option>
            {principals.value.map((p) => (
              <option key={p}>{p}</option>
            ))}
          </select>
        </label>
        <label>
          Agent{" "}
          <select value={agent.value} onChange={(e) => (agent.value = e.currentTarget.value)}>
            <option value="">all</option>
            {agents.value.map((a) => (
              <option key={a}>{a}</option>
            ))}
          </select>
        </label>
      </search>
      {error.value && (
        <p class="error" role="alert">
          {error.value}
        </p>
      )}
      {all.value === null ? (
        <p>Loading…</p>
      ) : shown.value.length === 0 ? (
        <p>No sessions match.</p>
      ) : (
        <div class="table-wrap">
          <table>
            <thead>
              <tr>
                <th scope="col">Session</th>
                <th scope="col">Principal</th>
                <th scope="col">Agent</th>
                <th scope="col">Channel</th>
                <th scope="col">Tokens</th>
                <th scope="col">Updated</th>
              </tr>
            </thead>
            <tbody>
              {shown.value.map((s) => (
                <tr key={s.id}>
                  <td>
                    <a href={href("sessions", s.id)}>{s.title ?? s.key ?? shortId(s.id)}</a>
                  </td>
                  <td>{s.principal}</td>
                  <td>{s.agentId ?? "default"}</td>
                  <td>{s.channel ?? "—"}</td>
                  <td>{s.tokensUsed}</td>
                  <td>{time(s.updatedAt)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  )
}
