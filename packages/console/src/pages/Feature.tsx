/**
 * Pages for features other parts of the daemon may offer (pairing codes, tasks, learning
 * candidates, incidents). The navigation shows one only when the daemon's own contract
 * (`/openapi.json`) lists its endpoint; the page lists what that endpoint answers.
 */
import { signal, useSignal } from "@preact/signals"
import { useEffect } from "preact/hooks"
import { api, messageOf } from "../api.js"

export interface FeatureInfo {
  readonly id: string
  readonly label: string
  readonly path: string
}

const KNOWN: ReadonlyArray<FeatureInfo> = [
  { id: "pairing", label: "Pairing", path: "/v1/pairing/codes" },
  { id: "tasks", label: "Tasks", path: "/v1/tasks" },
  { id: "learning", label: "Learning", path: "/v1/learning/candidates" },
  { id: "incidents", label: "Incidents", path: "/v1/incidents" }
]

export const features = signal<ReadonlyArray<FeatureInfo>>([])

export const loadFeatures = async () => {
  const { data } = await api.GET("/openapi.json")
  const paths = (data as { paths?: Record<string, { get?: unknown }> } | undefined)?.paths ?? {}
  features.value = KNOWN.filter((f) => paths[f.path]?.get !== undefined)
}

export const Feature = ({ feature }: { feature: FeatureInfo }) => {
  const rows = useSignal<ReadonlyArray<unknown> | null>(null)
  const error = useSignal<string | null>(null)
  useEffect(() => {
    fetch(feature.path, { credentials: "same-origin" }).then(async (response) => {
      const body: unknown = await response.json()
      if (response.ok) rows.value = Array.isArray(body) ? body : [body]
      else error.value = messageOf(body)
    })
  }, [feature.path])
  return (
    <section>
      <h1 tabIndex={-1}>{feature.label}</h1>
      {error.value && (
        <p class="error" role="alert">
          {error.value}
        </p>
      )}
      {rows.value?.length === 0 && <p>Nothing here.</p>}
      <ul class="plain">
        {(rows.value ?? []).map((row, i) => (
          <li key={i}>
            <pre>{JSON.stringify(row, null, 2)}</pre>
          </li>
        ))}
      </ul>
    </section>
  )
}
