/** Sign in with a token; the token goes to the server once and is kept nowhere in the browser. */
import { useSignal } from "@preact/signals"
import { useEffect } from "preact/hooks"
import { api, messageOf, session, setCsrfToken, signInNotice } from "../api.js"

export const SignIn = () => {
  const error = useSignal<string | null>(null)
  const busy = useSignal(false)
  // The page is usable from here on (`pnpm bench console` measures navigation start to this mark).
  useEffect(() => {
    performance.mark("palyra:sign-in-ready")
  }, [])
  const submit = async (event: Event) => {
    event.preventDefault()
    const form = event.currentTarget as HTMLFormElement
    const input = form.elements.namedItem("token") as HTMLInputElement
    busy.value = true
    error.value = null
    const { data, error: failed, response } = await api.POST("/v1/auth/session", { body: { token: input.value } })
    busy.value = false
    input.value = ""
    if (data) {
      signInNotice.value = null
      const { csrfToken, ...rest } = data
      setCsrfToken(csrfToken)
      session.value = rest
      return
    }
    error.value =
      response.status === 401
        ? "That token was not accepted."
        : messageOf(failed, `Sign-in failed (${response.status}).`)
    input.focus()
  }
  return (
    <main id="main" class="signin">
      <form onSubmit={submit} aria-describedby={error.value ? "signin-error" : undefined}>
        <h1 tabIndex={-1}>Palyra console</h1>
        {signInNotice.value && <p class="notice">{signInNotice.value}</p>}
        <label for="token">Token</label>
        <input
          id="token"
          name="token"
          type="password"
          autocomplete="off"
          required
          spellcheck={false}
          aria-invalid={error.value ? true : undefined}
        />
        <p class="hint">
          An operator token is in <code>.palyra/admin.token</code>. It is exchanged for a session cookie and not stored
          in this browser.
        </p>
        {error.value && (
          <p id="signin-error" class="error" role="alert">
            {error.value}
          </p>
        )}
        <button type="submit" disabled={busy.value}>
          Sign in
        </button>
      </form>
    </main>
  )
}
