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
 * Threat model — a same-host attacker. Cookies are not separated by port, so any other HTTP
 * service on this host name (a dev server on `127.0.0.1:5173` with a malicious dependency) is sent
 * `palyra_session` when the browser visits it, and can replay it server-side with any headers it
 * likes. Hence:
 * - The CSRF token is never in a read: `GET /v1/auth/session` says who is signed in, nothing more.
 *   Sign-in hands the token to the page, which keeps it in `sessionStorage` (per origin including
 *   port, so the other port's pages cannot read it).
 * - A new tab (or a reload that lost its `sessionStorage`) gets the token back from
 *   `POST /v1/auth/session/csrf` (`reissue`), which needs the cookie, `Sec-Fetch-Site: same-origin`
 *   and an `Origin` naming this `Host`. A page on the other port cannot pass it: its browser sends
 *   `Sec-Fetch-Site: same-site` and its own `Origin`, and page script cannot set either. A request
 *   without Fetch Metadata is refused outright (every browser the console supports sends it; a
 *   non-browser client has a bearer token and no use for the call).
 * - What a leaked cookie still allows: every read (GET) the signed-in principal may make, and — as
 *   a process outside any browser can write `Sec-Fetch-Site` and `Origin` itself — fetching the
 *   token from `reissue` and then acting. Fetch Metadata stops browser-borne attacks from the other
 *   port, not a process that holds the cookie; keep untrusted servers off the console's host name
 *   (or serve the console on its own host name, e.g. `palyra.localhost`) for that.
 *
 * The cookie name is not bound to the port (`palyra_session_<port>`): that would not stop the
 * other port receiving it (cookies go to every port), only stop two daemons on one host signing
 * each other's consoles out, and it would make the name, a constant of the HTTP contract's security
 * scheme, depend on configuration. Two daemons on one host name each sign the other's tab out
 * (their sessions are opaque and never confused), which is safe.
 *
 * Sessions are capped per principal (the oldest of that principal's is dropped) and globally; the
 * global cap refuses new sign-ins (429) rather than evicting anyone, so one token holder signing in
 * over and over cannot sign other principals out.
 *
 * @internal
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto"
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import type { Caller } from "@palyra/core"
import { Clock, Effect, Metric } from "effect"
import { type ConsoleSession, type ConsoleSignIn, CSRF_HEADER } from "../api/AuthGroup.js"

/** @internal */
export interface CookieSessionOptions {
  /** End a session after this many seconds without a request (default 1800). */
  readonly idleSeconds?: number | undefined
  /** End a session this many seconds after sign-in, however busy (default 43200). */
  readonly absoluteSeconds?: number | undefined
  /** Most sessions kept at once; past it new sign-ins are refused, nobody is evicted (default 1000). */
  readonly maxSessions?: number | undefined
  /** Most sessions one principal keeps; its oldest is dropped past it (default 20). */
  readonly maxSessionsPerPrincipal?: number | undefined
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

/** Why a sign-in was not taken: the daemon holds as many sessions as it will (429). @internal */
export interface Full {
  readonly code: "budget_exceeded"
  readonly message: string
}

const signIns = Metric.counter("palyra_console_sign_ins", {
  description: "Console sign-ins, by outcome (ok, refused, full)",
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

/**
 * Positive proof that a browser page of this very origin sent the request: `Sec-Fetch-Site:
 * same-origin` (a forbidden header page script cannot set) and an `Origin` naming this `Host`.
 * Unlike `crossOrigin`, a request without them is refused.
 *
 * @internal
 */
export const notSameOrigin = (request: HttpServerRequest.HttpServerRequest): string | undefined => {
  if (request.headers["sec-fetch-site"] !== "same-origin") return "needs Sec-Fetch-Site: same-origin"
  if (request.headers.origin === undefined) return "needs an Origin header"
  return crossOrigin(request)
}

/** @internal */
export const make = (options: CookieSessionOptions = {}) => {
  const idleMs = (options.idleSeconds ?? 1800) * 1000
  const absoluteMs = (options.absoluteSeconds ?? 43_200) * 1000
  const maxSessions = options.maxSessions ?? 1000
  const perPrincipal = options.maxSessionsPerPrincipal ?? 20
  const sessions = new Map<string, Entry>()

  const view = (entry: Entry): ConsoleSession => ({
    principal: entry.caller.principal,
    operator: entry.caller.operator,
    expiresAt: entry.createdAt + absoluteMs,
    idleExpiresAt: Math.min(entry.lastSeen + idleMs, entry.createdAt + absoluteMs)
  })
  const withToken = (entry: Entry): ConsoleSignIn => ({ ...view(entry), csrfToken: entry.csrf })
  const expired = (entry: Entry, now: number) => now - entry.lastSeen >= idleMs || now - entry.createdAt >= absoluteMs

  /** Make room for one more session of `principal`: its own oldest go first; others are never evicted. */
  const admit = (principal: string, now: number): boolean => {
    const own: Array<string> = []
    for (const [k, entry] of sessions) {
      if (expired(entry, now)) sessions.delete(k)
      else if (entry.caller.principal === principal) own.push(k)
    }
    // Insertion order is age order.
    for (const k of own.slice(0, Math.max(0, own.length - perPrincipal + 1))) sessions.delete(k)
    return sessions.size < maxSessions
  }

  /** The live entry for a cookie value, touched; expired ones are dropped. */
  const lookup = (id: string) =>
    Effect.gen(function* () {
      if (id === "") return yield* Effect.fail<Refusal>({ code: "unauthenticated", message: "not signed in" })
      const now = yield* Clock.currentTimeMillis
      const k = key(id)
      const entry = sessions.get(k)
      if (entry === undefined) return yield* Effect.fail<Refusal>({ code: "unauthenticated", message: "not signed in" })
      if (expired(entry, now)) {
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
    /**
     * Start a session for an authenticated caller: the cookie value and what the page may know.
     * Fails with 429 when the global cap is reached (nobody else is evicted for it).
     */
    create: (caller: Caller.Caller) =>
      Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        if (!admit(caller.principal, now)) {
          yield* Metric.increment(Metric.tagged(signIns, "outcome", "full"))
          yield* Effect.logWarning("console sign-in refused: session cap reached").pipe(
            Effect.annotateLogs({ principal: caller.principal, maxSessions })
          )
          return yield* Effect.fail<Full>({
            code: "budget_exceeded",
            message: `the console holds its limit of ${maxSessions} sessions; try again later`
          })
        }
        const id = randomBytes(32).toString("base64url")
        const entry: Entry = { caller, csrf: randomBytes(32).toString("base64url"), createdAt: now, lastSeen: now }
        sessions.set(key(id), entry)
        yield* Metric.increment(Metric.tagged(signIns, "outcome", "ok"))
        return { id, session: withToken(entry), maxAgeSeconds: Math.floor(absoluteMs / 1000) }
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
    /** The session a cookie names, without its CSRF token (reads need none and must not leak it). */
    current: (id: string) => Effect.map(lookup(id), ({ entry }) => view(entry)),
    /** The session with its CSRF token again, for a request a page of this origin provably sent. */
    reissue: (request: HttpServerRequest.HttpServerRequest, id: string) =>
      Effect.gen(function* () {
        const { entry } = yield* lookup(id)
        const why = notSameOrigin(request)
        if (why !== undefined) {
          yield* Effect.logInfo("console CSRF token refused").pipe(Effect.annotateLogs("reason", why))
          return yield* Effect.fail<Refusal>({ code: "permission_denied", message: why })
        }
        return withToken(entry)
      }).pipe(Effect.withSpan("ConsoleSession.reissue")),
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
