/** Small pieces the feature pages share. */
import { type Signal, useSignal } from "@preact/signals"
import { useEffect } from "preact/hooks"
import { messageOf } from "../api.js"

/** The server's error message, announced. */
export const Failure = ({ error }: { error: Signal<string | null> }) =>
  error.value ? (
    <p class="error" role="alert">
      {error.value}
    </p>
  ) : null

/**
 * A list loaded from the API (again whenever `deps` change, and every `refreshMs` if given); a
 * failed load keeps the last list and shows the server's message.
 */
export const useList = <A,>(
  load: () => Promise<{ data?: ReadonlyArray<A> | undefined; error?: unknown }>,
  deps: ReadonlyArray<unknown>,
  refreshMs?: number
) => {
  const rows = useSignal<ReadonlyArray<A> | null>(null)
  const error = useSignal<string | null>(null)
  const reload = async () => {
    const { data, error: failed } = await load()
    if (data) {
      rows.value = data
      error.value = null
    } else error.value = messageOf(failed)
  }
  useEffect(() => {
    let timer: ReturnType<typeof setTimeout> | undefined
    let stopped = false
    const tick = async () => {
      await reload()
      if (!stopped && refreshMs !== undefined) timer = setTimeout(tick, refreshMs)
    }
    void tick()
    return () => {
      stopped = true
      clearTimeout(timer)
    }
  }, deps)
  return { rows, error, reload }
}

/** Runs a state-changing call, shows its error if any, then reloads. */
export const act =
  (error: Signal<string | null>, reload: () => Promise<void>) => async (call: () => Promise<{ error?: unknown }>) => {
    const { error: failed } = await call()
    await reload()
    if (failed !== undefined) error.value = messageOf(failed)
  }

/** Basis points as a percentage: 6000 → "60%", 8250 → "82.5%". */
export const percent = (bps: number) => `${Number((bps / 100).toFixed(1))}%`
