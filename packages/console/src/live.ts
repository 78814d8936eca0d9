/**
 * Server-sent event streams through the browser's `EventSource` (the session cookie travels with
 * it; it reconnects by itself and resumes with `Last-Event-ID` where the stream sends ids). When a
 * stream is refused (the session ended), the UI goes back to sign-in.
 */
import { signal } from "@preact/signals"
import { useEffect } from "preact/hooks"
import { api, expire } from "./api.js"

/** Whether the open streams are connected (shown as a small status). */
export const connected = signal(true)

export const useEventSource = (
  url: string | null,
  handlers: Record<string, (event: MessageEvent<string>) => void>,
  deps: ReadonlyArray<unknown>
) => {
  useEffect(() => {
    if (url === null) return
    const source = new EventSource(url)
    for (const [name, handler] of Object.entries(handlers)) source.addEventListener(name, handler as EventListener)
    source.onopen = () => {
      connected.value = true
    }
    source.onerror = () => {
      connected.value = false
      // CLOSED means the browser gave up (an error status such as 401): find out whether we are signed out.
      if (source.readyState === EventSource.CLOSED) {
        api.GET("/v1/auth/session").then(({ data }) => {
          if (!data) expire()
        })
      }
    }
    return () => source.close()
  }, deps)
}
