/**
 * Handlers for the console's routes: sign-in with a cookie (`auth`) and the live approval inbox
 * (`approvalEvents`). Sign-in is transport authentication (the token becomes the same `Caller` the
 * bearer header would give); everything after it goes through the Gateway like any other route.
 */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { type Auth, Auth as CoreAuth, Gateway, Records } from "@palyra/core"
import { Effect, Schema, Stream } from "effect"
import { Api, CurrentCaller } from "../Api.js"
import { SESSION_COOKIE, SignInPayload } from "../api/AuthGroup.js"
import * as Sse from "../Sse.js"
import { readJson } from "./body.js"
import { answer, type HandlerOptions, keepAlive, sseResponse } from "./common.js"
import { type CookieSessions, crossOrigin, isTls } from "./cookieSession.js"

const cookieOf = (request: HttpServerRequest.HttpServerRequest) => request.cookies[SESSION_COOKIE] ?? ""

const withCookie = (
  response: HttpServerResponse.HttpServerResponse,
  request: HttpServerRequest.HttpServerRequest,
  sessions: CookieSessions,
  value: string,
  maxAgeSeconds: number
) =>
  HttpServerResponse.unsafeSetCookie(response, SESSION_COOKIE, value, {
    httpOnly: true,
    sameSite: "strict",
    path: "/",
    secure: sessions.options.secureCookies === true || isTls(request),
    maxAge: `${maxAgeSeconds} seconds`
  })

/** @internal */
export const auth = (options: HandlerOptions, tokens: ReadonlyArray<Auth.TokenGrant>, sessions: CookieSessions) =>
  HttpApiBuilder.group(Api, "auth", (handlers) => {
    const authenticate = CoreAuth.makeAuthenticator(tokens)
    return Effect.succeed(
      handlers
        .handleRaw("signIn", () =>
          Effect.gen(function* () {
            const request = yield* HttpServerRequest.HttpServerRequest
            // Login CSRF: another site must not sign this browser in as someone else.
            const forged = crossOrigin(request)
            if (forged !== undefined) return yield* Effect.fail({ code: "permission_denied" as const, message: forged })
            const body = yield* answer(readJson(SignInPayload, options.limits))
            const result = authenticate(`Bearer ${body.token}`)
            if (!("caller" in result)) {
              yield* sessions.refused
              yield* Effect.logInfo("console sign-in refused")
              return yield* Effect.fail({ code: "unauthenticated" as const, message: "invalid token" })
            }
            const created = yield* sessions.create(result.caller)
            yield* Effect.logInfo("console sign-in").pipe(Effect.annotateLogs("principal", result.caller.principal))
            return withCookie(
              HttpServerResponse.unsafeJson(created.session, { status: 201 }),
              request,
              sessions,
              created.id,
              created.maxAgeSeconds
            )
          })
        )
        .handle("current", () =>
          Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => sessions.current(cookieOf(request)))
        )
        .handle("csrf", () =>
          Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => sessions.reissue(request, cookieOf(request)))
        )
        .handleRaw("signOut", () =>
          Effect.gen(function* () {
            const request = yield* HttpServerRequest.HttpServerRequest
            yield* sessions.end(request, cookieOf(request))
            return withCookie(HttpServerResponse.empty({ status: 204 }), request, sessions, "", 0)
          })
        )
    )
  })

const encodeApproval = Schema.encodeSync(Records.ApprovalRecord)

/** @internal */
export const approvalEvents = (options: HandlerOptions) =>
  HttpApiBuilder.group(Api, "approvalEvents", (handlers) =>
    Effect.gen(function* () {
      const gateway = yield* Gateway.Gateway
      return handlers.handleRaw("events", () =>
        answer(
          Effect.map(CurrentCaller, (caller) => {
            // Subscribed before `ready` is sent: an approval requested once the client has seen
            // `ready` is always delivered.
            const frames = Stream.unwrapScoped(
              Effect.map(gateway.subscribeApprovalChanges(caller), (changes) =>
                Stream.concat(
                  Stream.make(Sse.comment("connected"), Sse.encode({ event: "ready", data: "{}" })),
                  Stream.map(changes, (record) =>
                    Sse.encode({
                      event: record.status === "pending" ? "requested" : "resolved",
                      data: JSON.stringify(encodeApproval(record))
                    })
                  )
                )
              )
            )
            return sseResponse(
              Stream.merge(frames, keepAlive(options), { haltStrategy: "left" }).pipe(
                Stream.interruptWhen(options.shutdown)
              )
            )
          })
        )
      )
    })
  )

/** @internal */
export const runList = HttpApiBuilder.group(Api, "runList", (handlers) =>
  Effect.gen(function* () {
    const gateway = yield* Gateway.Gateway
    return handlers.handle("list", ({ urlParams }) =>
      answer(
        Effect.flatMap(CurrentCaller, (caller) =>
          gateway.listRuns(caller, {
            sessionId: urlParams.sessionId,
            states: urlParams.state === undefined ? undefined : [urlParams.state],
            limit: urlParams.limit ?? 1000
          })
        )
      )
    )
  })
)
