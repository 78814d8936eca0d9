/**
 * Pages for features the daemon may run without (pairing needs `[[channels]]`; tasks, learning,
 * incidents and memory can be switched off). The navigation shows one only when the daemon's own
 * contract (`/openapi.json`) lists its endpoint and the endpoint answers this user: 404 (the
 * feature is switched off) and 403 (operators only) hide the page, and so does being no operator
 * for the operators' pages (the server decides; this only spares others a page of refusals). Any
 * other answer shows the page, which then shows the server's message for an error (e.g. 409
 * "channels are not configured").
 */
import { signal } from "@preact/signals"
import { api } from "./api.js"

export interface FeatureInfo {
  readonly id: "pairing" | "tasks" | "learning" | "incidents" | "memory"
  readonly label: string
  readonly path: string
  /** A cheap request to the endpoint: what it answers decides whether the page is shown. */
  readonly probe: string
  /** Documented as operators only. */
  readonly operator: boolean
}

const KNOWN: ReadonlyArray<FeatureInfo> = [
  { id: "pairing", operator: true, label: "Pairing", path: "/v1/pairing/codes", probe: "/v1/pairing/codes" },
  { id: "tasks", operator: true, label: "Tasks", path: "/v1/tasks", probe: "/v1/tasks?limit=1" },
  {
    id: "learning",
    operator: false,
    label: "Learning",
    path: "/v1/learning/candidates",
    probe: "/v1/learning/candidates"
  },
  { id: "memory", operator: false, label: "Memory", path: "/v1/memory", probe: "/v1/memory?q=memory&limit=1" },
  { id: "incidents", operator: true, label: "Incidents", path: "/v1/incidents", probe: "/v1/incidents?limit=1" }
]

/** The optional features this daemon offers. */
export const features = signal<ReadonlyArray<FeatureInfo>>([])

export const loadFeatures = async (operator: boolean) => {
  const { data } = await api.GET("/openapi.json")
  const paths = (data as { paths?: Record<string, { get?: unknown }> } | undefined)?.paths ?? {}
  const listed = KNOWN.filter((f) => paths[f.path]?.get !== undefined && (operator || !f.operator))
  const answers = await Promise.all(
    listed.map((f) =>
      fetch(f.probe, { credentials: "same-origin" }).then(
        (r) => r.status,
        () => 0
      )
    )
  )
  features.value = listed.filter((_, i) => answers[i] !== 404 && answers[i] !== 403)
}
