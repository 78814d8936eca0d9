/**
 * Pages for features the daemon may run without (pairing needs `[[channels]]`; tasks, learning,
 * incidents and memory can be switched off). The navigation shows one only when the daemon's own
 * contract (`/openapi.json`) lists its endpoint; a page whose endpoint then answers an error (e.g.
 * 409 "channels are not configured") shows the server's message.
 */
import { signal } from "@preact/signals"
import { api } from "./api.js"

export interface FeatureInfo {
  readonly id: "pairing" | "tasks" | "learning" | "incidents" | "memory"
  readonly label: string
  readonly path: string
}

const KNOWN: ReadonlyArray<FeatureInfo> = [
  { id: "pairing", label: "Pairing", path: "/v1/pairing/codes" },
  { id: "tasks", label: "Tasks", path: "/v1/tasks" },
  { id: "learning", label: "Learning", path: "/v1/learning/candidates" },
  { id: "memory", label: "Memory", path: "/v1/memory" },
  { id: "incidents", label: "Incidents", path: "/v1/incidents" }
]

/** The optional features this daemon offers. */
export const features = signal<ReadonlyArray<FeatureInfo>>([])

export const loadFeatures = async () => {
  const { data } = await api.GET("/openapi.json")
  const paths = (data as { paths?: Record<string, { get?: unknown }> } | undefined)?.paths ?? {}
  features.value = KNOWN.filter((f) => paths[f.path]?.get !== undefined)
}
