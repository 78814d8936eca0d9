/**
 * Browser sign-in (`/v1/auth/session`): a token is exchanged once for an opaque session cookie
 * (`HttpOnly`, `SameSite=Strict`, `Path=/`, `Secure` over TLS) and a CSRF token the page keeps in
 * memory and sends as `x-csrf-token` on every state-changing request. The cookie then
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
 * A signed-in browser session: who it is, the CSRF token to send as `x-csrf-token`, and when it
 * ends (epoch ms; idle expiry moves with every request).
 *
 * @since 0.1.0
 * @category Records
 */
export const ConsoleSession = Schema.Struct({
  principal: Schema.String,
  operator: Schema.Boolean,
  csrfToken: Schema.String,
  expiresAt: Schema.Number,
  idleExpiresAt: Schema.Number
}).annotations({ identifier: "ConsoleSession" })

/** @since 0.1.0 @category Records */
export type ConsoleSession = typeof ConsoleSession.Type

/**
 * `POST` signs in (201 and the cookie; a bad token is 401 and sets nothing), `GET` reads the
 * current session (401 when there is none or it expired), `DELETE` signs out (needs the CSRF
 * token).
 *
 * @since 0.1.0
 * @category Groups
 */
export class AuthGroup extends HttpApiGroup.make("auth")
  .add(
    HttpApiEndpoint.post("signIn", "/v1/auth/session")
      .setPayload(SignInPayload)
      .addSuccess(ConsoleSession, { status: 201 })
      .annotate(OpenApi.Summary, "Exchange a token for a session cookie (HttpOnly, SameSite=Strict) and a CSRF token")
  )
  .add(
    HttpApiEndpoint.get("current", "/v1/auth/session")
      .addSuccess(ConsoleSession)
      .annotate(OpenApi.Summary, "The session the cookie names, with its CSRF token")
  )
  .add(
    HttpApiEndpoint.del("signOut", "/v1/auth/session")
      .addSuccess(HttpApiSchema.NoContent)
      .annotate(OpenApi.Summary, "End the session the cookie names (needs `x-csrf-token`) and clear the cookie")
  ) {}
