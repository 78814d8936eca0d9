/**
 * Cookie sessions for the browser console: transport authentication only. A session maps an
 * opaque random id (the cookie) to the same `Caller` the bearer token gives; authorization stays
 * in the Gateway. Sessions live in memory (a restart signs everyone out) with an idle and an
 * absolute expiry, keyed by the SHA-256 of the id so the id itself is kept nowhere.
 *
 * A cookie travels with every request the browser makes to this origin, so a state-changing
 * request authenticated by it must also prove it came from the page: the session's CSRF token in
 * `x-csrf-token` (synchronizer token, compared in constant time), and no cross-origin `Origin` or
 * `Sec-Fetch-Site`.
 *
 * @internal
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto"
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import type { Caller } from "@palyra/core"
import { Clock, Effect, Metric } from "effect"
import { type ConsoleSession, CSRF_HEADER } from "../api/AuthGroup.js"

/** @internal */
export interface CookieSessionOptions {
  /** End a session after this many seconds without a request (default 1800). */
  readonly idleSeconds?: number | undefined
  /** End a session this many seconds after sign-in, however busy (default 43200). */
  readonly absoluteSeconds?: number | undefined
  /** Most sessions kept at once; the oldest is dropped past it (default 1000). */
  readonly maxSessions?: number | undefined
  /** Always mark the cookie `Secure` (default: only when the request came over TLS). */
  readonly secureCookies?: boolean | undefined
}

interface Entry {
  readonly caller: Caller.Caller
  readonly csrf: string
  readonly createdAt: number
  lastSeen: number
}

/** Why a cookie did not authenticate: 401 (no or ended session) or 403 (a forged request). @internal */
export type Refusal =
  | { readonly code: "unauthenticated"; readonly message: string }
  | { readonly code: "permission_denied"; readonly message: string }

const signIns = Metric.counter("palyra_console_sign_ins", {
  description: "Console sign-ins, by outcome (ok, refused)",
  incremental: true
})

const SAFE = new Set(["GET", "HEAD", "OPTIONS"])
const key = (id: string) => createHash("sha256").update(id).digest("hex")
const sameSecret = (a: string, b: string) => {
  const x = createHash("sha256").update(a).digest()
  const y = createHash("sha256").update(b).digest()
  return timingSafeEqual(x, y)
}

/** Whether the request came over TLS (directly or, as a proxy says, before it). @internal */
export const isTls = (request: HttpServerRequest.HttpServerRequest): boolean =>
  request.headers["x-forwarded-proto"] === "https" || request.url.startsWith("https:")

/**
 * Refuse a request a cross-origin page could have sent: an `Origin` whose host is not this
 * request's `Host`, or `Sec-Fetch-Site` saying it is cross-site or same-site (another port or
 * subdomain). Requests without either header (non-browser clients) pass.
 *
 * @internal
 */
export const crossOrigin = (request: HttpServerRequest.HttpServerRequest): string | undefined => {
  const site = request.headers["sec-fetch-site"]
  if (site !== undefined && site !== "same-origin" && site !== "none") return `cross-site request (${site})`
  const origin = request.headers.origin
  if (origin === undefined) return undefined
  let host: string
  try {
    host = new URL(origin).host
  } catch {
    return "malformed Origin"
  }
  return host === request.headers.host ? undefined : "cross-origin request"
}

/** @internal */
export const make = (options: CookieSessionOptions = {}) => {
  const idleMs = (options.idleSeconds ?? 1800) * 1000
  const absoluteMs = (options.absoluteSeconds ?? 43_200) * 1000
  const maxSessions = options.maxSessions ?? 1000
  const sessions = new Map<string, Entry>()

  const view = (entry: Entry): ConsoleSession => ({
    principal: entry.caller.principal,
    operator: entry.caller.operator,
    csrfToken: entry.csrf,
    expiresAt: entry.createdAt + absoluteMs,
    idleExpiresAt: Math.min(entry.lastSeen + idleMs, entry.createdAt + absoluteMs)
  })

  /** The live entry for a cookie value, touched; expired ones are dropped. */
  const lookup = (id: string) =>
    Effect.gen(function* () {
      if (id === "") return yield* Effect.fail<Refusal>({ code: "unauthenticated", message: "not signed in" })
      const now = yield* Clock.currentTimeMillis
      const k = key(id)
      const entry = sessions.get(k)
      if (entry === undefined) return yield* Effect.fail<Refusal>({ code: "unauthenticated", message: "not signed in" })
      if (now - entry.lastSeen >= idleMs || now - entry.createdAt >= absoluteMs) {
        sessions.delete(k)
        return yield* Effect.fail<Refusal>({ code: "unauthenticated", message: "session expired; sign in again" })
      }
      entry.lastSeen = now
      return { key: k, entry }
    })

  /** A state-changing request must carry the session's CSRF token and come from this origin. */
  const checkForgery = (request: HttpServerRequest.HttpServerRequest, entry: Entry) => {
    if (SAFE.has(request.method)) return Effect.void
    const why = crossOrigin(request)
    if (why !== undefined) return Effect.fail<Refusal>({ code: "permission_denied", message: why })
    const presented = request.headers[CSRF_HEADER]
    if (presented === undefined || presented === "")
      return Effect.fail<Refusal>({ code: "permission_denied", message: `missing ${CSRF_HEADER} header` })
    return sameSecret(presented, entry.csrf)
      ? Effect.void
      : Effect.fail<Refusal>({ code: "permission_denied", message: `wrong ${CSRF_HEADER} header` })
  }

  return {
    options,
    /** Start a session for an authenticated caller: the cookie value and what the page may know. */
    create: (caller: Caller.Caller) =>
      Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        const id = randomBytes(32).toString("base64url")
        const entry: Entry = { caller, csrf: randomBytes(32).toString("base64url"), createdAt: now, lastSeen: now }
        sessions.set(key(id), entry)
        // Oldest first (insertion order): the cap bounds memory whatever signs in.
        for (const k of sessions.keys()) {
          if (sessions.size <= maxSessions) break
          sessions.delete(k)
        }
        yield* Metric.increment(Metric.tagged(signIns, "outcome", "ok"))
        return { id, session: view(entry), maxAgeSeconds: Math.floor(absoluteMs / 1000) }
      }).pipe(Effect.withSpan("ConsoleSession.create", { attributes: { principal: caller.principal } })),
    /** Count a refused sign-in. */
    refused: Metric.increment(Metric.tagged(signIns, "outcome", "refused")),
    /** The caller a cookie authenticates for this request (CSRF and origin checked when it changes state). */
    authenticate: (request: HttpServerRequest.HttpServerRequest, id: string) =>
      Effect.gen(function* () {
        const { entry } = yield* lookup(id)
        yield* checkForgery(request, entry)
        return entry.caller
      }),
    /** The session a cookie names (reads need no CSRF token). */
    current: (id: string) => Effect.map(lookup(id), ({ entry }) => view(entry)),
    /** End the session a cookie names; the request must pass the CSRF checks. */
    end: (request: HttpServerRequest.HttpServerRequest, id: string) =>
      Effect.gen(function* () {
        const found = yield* lookup(id)
        yield* checkForgery(request, found.entry)
        sessions.delete(found.key)
      }).pipe(Effect.withSpan("ConsoleSession.end")),
    /** How many sessions are live or not yet swept (for tests and diagnostics). */
    size: () => sessions.size
  }
}

/** @internal */
export type CookieSessions = ReturnType<typeof make>
