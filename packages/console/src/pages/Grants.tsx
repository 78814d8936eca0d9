/** Standing grants, each shown as the Cedar policy it is; revoke. */
import { useSignal } from "@preact/signals"
import { useEffect } from "preact/hooks"
import { api, type Grant, messageOf, time } from "../api.js"

export const Grants = () => {
  const grants = useSignal<ReadonlyArray<Grant> | null>(null)
  const error = useSignal<string | null>(null)
  const load = async () => {
    const { data, error: failed } = await api.GET("/v1/grants")
    if (data) grants.value = data
    else error.value = messageOf(failed)
  }
  useEffect(() => {
    void load()
  }, [])
  const revoke = async (id: string) => {
    const { error: failed } = await api.POST("/v1/grants/{id}/revoke", { params: { path: { id } } })
    if (failed) error.value = messageOf(failed)
    await load()
  }
  return (
    <section>
      <h1 tabIndex={-1}>Grants</h1>
      {error.value && (
        <p class="error" role="alert">
          {error.value}
        </p>
      )}
      {grants.value === null ? (
        <p>Loading…</p>
      ) : grants.value.length === 0 ? (
        <p>No standing grants.</p>
      ) : (
        <div class="cards">
          {grants.value.map((g) => (
            <article class="card" key={g.id} aria-labelledby={`grant-${g.id}`}>
              <h2 id={`grant-${g.id}`}>
                <code>{g.tool}</code> <span class="badge">{g.scope}</span>{" "}
                <span class={`badge grant-${g.status}`}>{g.status}</span>
              </h2>
              <p class="muted">
                {g.principal} · by {g.resolver ?? "?"}
                {g.resolvedAt ? ` at ${time(g.resolvedAt)}` : ""} · used {g.grantUses ?? 0}
                {g.grantMaxUses ? ` of ${g.grantMaxUses}` : ""} times
                {g.grantExpiresAt ? ` · until ${time(g.grantExpiresAt)}` : ""}
              </p>
              <pre class="policy">{g.policy ?? "(no policy text)"}</pre>
              {g.status === "approved" && (
                <div class="actions">
                  <button type="button" class="danger" onClick={() => revoke(g.id)}>
                    Revoke<span class="sr-only"> the grant for {g.tool}</span>
                  </button>
                </div>
              )}
            </article>
          ))}
        </div>
      )}
    </section>
  )
}
