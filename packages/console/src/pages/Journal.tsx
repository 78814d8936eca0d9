/** Verify the journal's hash chain and recorded rows; show the result and the first bad row. */
import { useSignal } from "@preact/signals"
import { api, messageOf, type VerifyResult } from "../api.js"

export const Journal = () => {
  const result = useSignal<VerifyResult | null>(null)
  const error = useSignal<string | null>(null)
  const busy = useSignal(false)
  const verify = async () => {
    busy.value = true
    error.value = null
    const { data, error: failed } = await api.GET("/v1/journal/verify")
    busy.value = false
    if (data) result.value = data
    else error.value = messageOf(failed)
  }
  const r = result.value
  return (
    <section>
      <h1 tabIndex={-1}>Journal</h1>
      <p class="lede">Recompute the tape's SHA-256 chain and check every session, run and approval row.</p>
      <button type="button" onClick={verify} disabled={busy.value}>
        {busy.value ? "Verifying…" : "Verify the journal"}
      </button>
      <div aria-live="polite">
        {error.value && (
          <p class="error" role="alert">
            {error.value}
          </p>
        )}
        {r?.ok === true && (
          <p class="ok" data-testid="verify-result">
            Intact: {r.checked} events checked.
          </p>
        )}
        {r?.ok === false && (
          <div class="error" data-testid="verify-result">
            <p>
              Tampering found ({r.reason}) after {r.checked} events: {r.detail}
            </p>
            <dl>
              <dt>Session</dt>
              <dd>
                <code>{r.sessionId}</code>
              </dd>
              <dt>Tape sequence</dt>
              <dd>{r.tapeSeq}</dd>
              {r.row && (
                <>
                  <dt>First bad row</dt>
                  <dd>
                    {r.row.table} <code>{r.row.id}</code> ({r.row.columns.join(", ")})
                  </dd>
                </>
              )}
            </dl>
          </div>
        )}
      </div>
    </section>
  )
}
