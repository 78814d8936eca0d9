/** Search your own memory (what the agent remembers about you) and forget an item. */
import { useSignal } from "@preact/signals"
import { api, messageOf, type Schemas, shortId, time } from "../api.js"
import { Failure, percent } from "./common.js"

type Hit = Schemas["MemoryHit"]

export const Memory = () => {
  const query = useSignal("")
  const searched = useSignal<string | null>(null)
  const hits = useSignal<ReadonlyArray<Hit> | null>(null)
  const error = useSignal<string | null>(null)
  const search = async (q: string) => {
    const { data, error: failed } = await api.GET("/v1/memory", { params: { query: { q, limit: 50 } } })
    searched.value = q
    hits.value = data ?? null
    error.value = data ? null : messageOf(failed)
  }
  const submit = (e: Event) => {
    e.preventDefault()
    const q = query.value.trim()
    if (q) void search(q)
  }
  const forget = async (id: string) => {
    const { error: failed } = await api.DELETE("/v1/memory/{id}", { params: { path: { id } } })
    if (searched.value) await search(searched.value)
    if (failed !== undefined) error.value = messageOf(failed)
  }
  return (
    <section>
      <h1 tabIndex={-1}>Memory</h1>
      <form class="filters" onSubmit={submit}>
        <label>
          Search memory{" "}
          <input type="search" required value={query.value} onInput={(e) => (query.value = e.currentTarget.value)} />
        </label>
        <button type="submit">Search</button>
      </form>
      <Failure error={error} />
      {searched.value !== null && hits.value !== null && (
        <p class="lede" aria-live="polite">
          {hits.value.length === 0
            ? `Nothing remembered about “${searched.value}”.`
            : `${hits.value.length} found for “${searched.value}”`}
        </p>
      )}
      <ul class="plain cards">
        {(hits.value ?? []).map(({ item }) => (
          <li class="card" key={item.id}>
            <p>
              <span class="badge">{item.kind}</span> {item.text}
            </p>
            <p class="muted">
              {time(item.createdAt)}
              {item.confidenceBps !== null ? ` · ${percent(item.confidenceBps)} confident` : ""}
              {item.sourceRunId ? ` · from run ${shortId(item.sourceRunId)}` : ""}
              {item.pinned ? " · pinned" : ""}
            </p>
            <div class="actions">
              <button type="button" class="danger small" onClick={() => forget(item.id)}>
                Forget<span class="sr-only"> “{item.text}”</span>
              </button>
            </div>
          </li>
        ))}
      </ul>
    </section>
  )
}
