/**
 * The daemon's HTTP API, typed from its contract (`gen/api.ts`, produced at build time by
 * `openapi-typescript` from the OpenAPI document `@palyra/transport-http` derives from `Api.ts`),
 * called with `openapi-fetch`. The session cookie travels by itself (same origin, HttpOnly); the
 * CSRF token (from sign-in, or for a new tab from `POST /v1/auth/session/csrf`) lives in this tab's
 * `sessionStorage` — per origin including port, so another server on this host cannot read it — and
 * goes out as `x-csrf-token` on every state-changing request. A 401 anywhere ends the session in the
 * UI: back to sign-in.
 */
import { signal } from "@preact/signals"
import createClient, { type Middleware } from "openapi-fetch"
import type { components, paths } from "./gen/api.js"

export type Schemas = components["schemas"]
export type ConsoleSession = Schemas["ConsoleSession"]
export type ConsoleSignIn = Schemas["ConsoleSignIn"]
export type ApprovalRecord = Schemas["ApprovalRecord"]
export type Grant = Schemas["Grant"]
export type Run = Schemas["Run"]
export type Session = Schemas["Session"]
export type TapeEvent = Schemas["TapeEvent"]
export type TapeEventOf<T extends TapeEvent["_tag"]> = Extract<TapeEvent, { _tag: T }>
export type VerifyResult = paths["/v1/journal/verify"]["get"]["responses"]["200"]["content"]["application/json"]

/** The signed-in session (`null`: show sign-in; `undefined`: not known yet). */
export const session = signal<ConsoleSession | null | undefined>(undefined)
/** Why the user is looking at the sign-in page, if not by choice. */
export const signInNotice = signal<string | null>(null)

const SAFE = new Set(["GET", "HEAD", "OPTIONS"])
const CSRF_KEY = "palyra.csrf"

/** This tab's CSRF token (`null` when it has none yet). */
export const csrfToken = (): string | null => sessionStorage.getItem(CSRF_KEY)
/** Keep (or, with `null`, forget) this tab's CSRF token. */
export const setCsrfToken = (token: string | null) => {
  if (token === null) sessionStorage.removeItem(CSRF_KEY)
  else sessionStorage.setItem(CSRF_KEY, token)
}

const csrf: Middleware = {
  onRequest({ request }) {
    const token = csrfToken() ?? undefined
    if (!SAFE.has(request.method) && token !== undefined) request.headers.set("x-csrf-token", token)
    return request
  },
  async onResponse({ response, request }) {
    if (response.status === 401 && !request.url.endsWith("/v1/auth/session")) {
      expire()
    }
    // Another tab signed in again (a new cookie, a new token): fetch this session's token, so the
    // next try works; this answer's error is still shown.
    if (response.status === 403 && !SAFE.has(request.method) && !request.url.endsWith("/v1/auth/session/csrf")) {
      const body: unknown = await response
        .clone()
        .json()
        .catch(() => null)
      if (messageOf(body, "").includes("x-csrf-token")) {
        const reissued = await fetch("/v1/auth/session/csrf", { method: "POST", credentials: "same-origin" })
        if (reissued.ok) setCsrfToken(((await reissued.json()) as ConsoleSignIn).csrfToken)
      }
    }
    return response
  }
}

/** The session ended on the server (idle or absolute expiry, sign-out elsewhere). */
export const expire = () => {
  if (session.value) signInNotice.value = "Your session expired. Sign in again."
  setCsrfToken(null)
  session.value = null
}

export const api = createClient<paths>({ baseUrl: location.origin, credentials: "same-origin" })
api.use(csrf)

/**
 * Who is signed in, with a CSRF token in this tab: a reload keeps the tab's token; a new tab asks
 * for it with a same-origin `POST /v1/auth/session/csrf` (the browser's Fetch Metadata proves the
 * origin). `null` when not signed in.
 */
export const restoreSession = async (): Promise<ConsoleSession | null> => {
  const { data } = await api.GET("/v1/auth/session")
  if (!data) {
    setCsrfToken(null)
    return null
  }
  if (csrfToken() !== null) return data
  const reissued = await api.POST("/v1/auth/session/csrf")
  if (!reissued.data) return null
  setCsrfToken(reissued.data.csrfToken)
  return data
}

/** The message of an error body (`{ code, message }`), or a fallback. */
export const messageOf = (error: unknown, fallback = "Something went wrong."): string => {
  if (typeof error === "object" && error !== null && "message" in error && typeof error.message === "string")
    return error.message
  return fallback
}

export const shortId = (id: string) => `…${id.slice(-6)}`
export const time = (ms: number) => new Date(ms).toLocaleString()
export const duration = (ms: number) =>
  ms < 1000 ? `${ms} ms` : ms < 60_000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms / 60_000)} min`
