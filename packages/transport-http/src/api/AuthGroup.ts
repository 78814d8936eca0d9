/**
 * Browser sign-in (`/v1/auth/session`): a token is exchanged once for an opaque session cookie
 * (`HttpOnly`, `SameSite=Strict`, `Path=/`, `Secure` over TLS) and a CSRF token the page keeps in
 * `sessionStorage` and sends as `x-csrf-token` on every state-changing request. Only sign-in and
 * `POST /v1/auth/session/csrf` (a browser's same-origin proof besides the cookie) hand the CSRF
 * token out; `GET /v1/auth/session` never does (see `internal/cookieSession.ts` for why). The cookie then
 * authenticates every route the bearer token does, as the same caller. Bearer tokens keep working
 * unchanged.
 *
 * The group imports nothing from `Api.ts`; `Api.ts` adds it with the shared error bodies.
 *
 * @since 0.1.0
 */
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import * as HttpApiSecurity from "@effect/platform/HttpApiSecurity"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"

/** The session cookie's name. @since 0.1.0 @category Security */
export const SESSION_COOKIE = "palyra_session"

/** The header a cookie-authenticated, state-changing request carries its CSRF token in. @since 0.1.0 @category Security */
export const CSRF_HEADER = "x-csrf-token"

/**
 * The session cookie as a security scheme (the `Authentication` middleware accepts it besides the
 * bearer token).
 *
 * @since 0.1.0
 * @category Security
 */
export const sessionCookie = HttpApiSecurity.apiKey({ in: "cookie", key: SESSION_COOKIE }).pipe(
  HttpApiSecurity.annotate(
    OpenApi.Description,
    "The console's session cookie from `POST /v1/auth/session`; state-changing requests also send `x-csrf-token`"
  )
)

/** @since 0.1.0 @category Payloads */
export const SignInPayload = Schema.Struct({
  token: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(4096))
}).annotations({ identifier: "SignInRequest" })

/**
 * A signed-in browser session: who it is and when it ends (epoch ms; idle expiry moves with every
 * request). It carries no CSRF token: a cookie alone must not be enough to get one.
 *
 * @since 0.1.0
 * @category Records
 */
export const ConsoleSession = Schema.Struct({
  principal: Schema.String,
  operator: Schema.Boolean,
  expiresAt: Schema.Number,
  idleExpiresAt: Schema.Number
}).annotations({ identifier: "ConsoleSession" })

/** @since 0.1.0 @category Records */
export type ConsoleSession = typeof ConsoleSession.Type

/**
 * The session with the CSRF token to send as `x-csrf-token`: the answer to sign-in and to the
 * same-origin `POST /v1/auth/session/csrf`, never to a plain read.
 *
 * @since 0.1.0
 * @category Records
 */
export const ConsoleSignIn = Schema.Struct({
  ...ConsoleSession.fields,
  csrfToken: Schema.String
}).annotations({ identifier: "ConsoleSignIn" })

/** @since 0.1.0 @category Records */
export type ConsoleSignIn = typeof ConsoleSignIn.Type

/**
 * `POST` signs in (201 and the cookie; a bad token is 401 and sets nothing; 429 when the daemon
 * holds as many sessions as it will), `GET` reads the current session without its CSRF token (401
 * when there is none or it expired), `POST …/csrf` gives a new tab of the console the token back
 * (cookie plus `Sec-Fetch-Site: same-origin` and a same-origin `Origin`), `DELETE` signs out (needs
 * the CSRF token).
 *
 * @since 0.1.0
 * @category Groups
 */
export class AuthGroup extends HttpApiGroup.make("auth")
  .add(
    HttpApiEndpoint.post("signIn", "/v1/auth/session")
      .setPayload(SignInPayload)
      .addSuccess(ConsoleSignIn, { status: 201 })
      .annotate(OpenApi.Summary, "Exchange a token for a session cookie (HttpOnly, SameSite=Strict) and a CSRF token")
  )
  .add(
    HttpApiEndpoint.get("current", "/v1/auth/session")
      .addSuccess(ConsoleSession)
      .annotate(OpenApi.Summary, "The session the cookie names (without its CSRF token)")
  )
  .add(
    HttpApiEndpoint.post("csrf", "/v1/auth/session/csrf")
      .addSuccess(ConsoleSignIn)
      .annotate(
        OpenApi.Summary,
        "The session's CSRF token again, for a new console tab: needs the cookie, `Sec-Fetch-Site: same-origin` and a same-origin `Origin`"
      )
  )
  .add(
    HttpApiEndpoint.del("signOut", "/v1/auth/session")
      .addSuccess(HttpApiSchema.NoContent)
      .annotate(OpenApi.Summary, "End the session the cookie names (needs `x-csrf-token`) and clear the cookie")
  ) {}
