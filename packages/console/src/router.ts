/** Hash routing (`#/approvals`, `#/sessions/ID`): the server serves one page, so any deep link works. */
import { signal } from "@preact/signals"

const read = () => (location.hash.replace(/^#\/?/, "") || "approvals").split("/")

/** The current route's segments, e.g. `["sessions", "01K…"]`. */
export const route = signal<ReadonlyArray<string>>(read())
addEventListener("hashchange", () => {
  route.value = read()
})

export const href = (...segments: ReadonlyArray<string>) => `#/${segments.map(encodeURIComponent).join("/")}`
