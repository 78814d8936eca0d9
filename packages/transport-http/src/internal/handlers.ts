/**
 * The API's handlers: each authenticated route is one Gateway call; ownership is the Gateway's
 * business. Failures become `{ code, message }` through core's error table.
 */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as OpenApi from "@effect/platform/OpenApi"
import { Auth, Gateway } from "@palyra/core"
import { Clock, Effect, Layer, Redacted, Scope } from "effect"
import {
  Api,
  ApprovalPayload,
  Authentication,
  BranchPayload,
  CurrentCaller,
  MetricsAuthentication,
  OpenAiAuthentication,
  RestorePayload,
  SessionPayload
} from "../Api.js"
import { backgroundHandlers } from "./background.js"
import { readJson } from "./body.js"
import { chatCompletions } from "./chat.js"
import { answer, type HandlerOptions, messageRequest } from "./common.js"
import { approvalEvents, auth, runList } from "./consoleHandlers.js"
import type { CookieSessions } from "./cookieSession.js"
import { readMessage } from "./multipart.js"
import { openAiError } from "./openaiErrors.js"
import { pairing } from "./pairing.js"
import { nodeResponse, tapeStart } from "./startStream.js"
import { tapeResponse } from "./tapeBody.js"

const runs = (options: HandlerOptions) =>
  HttpApiBuilder.group(Api, "runs", (handlers) =>
    Effect.gen(function* () {
      const gateway = yield* Gateway.Gateway
      return handlers
        .handleRaw("create", ({ urlParams, request: http }) =>
          answer(
            Effect.gen(function* () {
              const caller = yield* CurrentCaller
              const body = yield* readMessage(options.limits)
              const request = messageRequest(body)
              if (urlParams.stream === true) {
                // Served by Node: the response starts inside the start commit's publication.
                const res = nodeResponse(options, http)
                if (res !== undefined)
                  return yield* tapeStart(options, res, (attached) =>
                    gateway.startRunFollowing(caller, request, { attached })
                  )
                // The run's follower is attached before its first commit (its events delivered by
                // their publication, none read back) and lives in the request's scope, which the
                // server closes once the response is written or the client is gone.
                const started = yield* gateway.startRunFollowing(caller, request)
                return tapeResponse(options, started.follower)
              }
              const { session, run } = yield* gateway.sendMessage(caller, request)
              return { runId: run.id, sessionId: session.id, state: run.state }
            })
          )
        )
        .handle("get", ({ path }) => answer(Effect.flatMap(CurrentCaller, (caller) => gateway.getRun(caller, path.id))))
        .handle("cancel", ({ path }) =>
          answer(Effect.flatMap(CurrentCaller, (caller) => gateway.cancelRun(caller, path.id)))
        )
    })
  )

const sessions = (options: HandlerOptions) =>
  HttpApiBuilder.group(Api, "sessions", (handlers) =>
    Effect.gen(function* () {
      const gateway = yield* Gateway.Gateway
      return handlers
        .handle("list", ({ urlParams }) =>
          answer(
            Effect.flatMap(CurrentCaller, (caller) =>
              gateway.listSessions(caller, {
                includeArchived: urlParams.archived ?? false,
                limit: urlParams.limit ?? 100
              })
            )
          )
        )
        .handleRaw("create", () =>
          answer(
            Effect.gen(function* () {
              const caller = yield* CurrentCaller
              const body = yield* readJson(SessionPayload, options.limits)
              return yield* gateway.resolveSession(caller, {
                key: body.sessionKey,
                title: body.title,
                channel: body.channel,
                agent: body.agent
              })
            })
          )
        )
        .handle("get", ({ path }) =>
          answer(Effect.flatMap(CurrentCaller, (caller) => gateway.getSession(caller, path.id)))
        )
        .handle("reset", ({ path }) =>
          answer(Effect.flatMap(CurrentCaller, (caller) => gateway.resetSession(caller, path.id)))
        )
        .handleRaw("branch", ({ path }) =>
          answer(
            Effect.gen(function* () {
              const caller = yield* CurrentCaller
              const body = yield* readJson(BranchPayload, options.limits)
              return yield* gateway.branchSession(caller, path.id, { atSeq: body.atSeq, title: body.title })
            })
          )
        )
        .handle("tape", ({ path, urlParams }) =>
          answer(
            Effect.flatMap(CurrentCaller, (caller) =>
              gateway.readTape(caller, path.id, { afterSeq: urlParams.after ?? 0, limit: urlParams.limit ?? 500 })
            )
          )
        )
        .handle("compact", ({ path, urlParams }) =>
          answer(
            Effect.flatMap(CurrentCaller, (caller) =>
              Effect.map(gateway.compactSession(caller, path.id, { preview: urlParams.preview }), (c) => ({
                applied: c.applied,
                sessionId: c.sessionId,
                fromSeq: c.fromSeq,
                toSeq: c.toSeq,
                summary: c.summary,
                strategy: c.strategy,
                summarizer: c.summarizer,
                rejected: c.rejected,
                tokensBefore: c.tokensBefore,
                tokensAfter: c.tokensAfter,
                checkpointId: c.checkpointId
              }))
            )
          )
        )
        .handle("checkpoints", ({ path }) =>
          answer(Effect.flatMap(CurrentCaller, (caller) => gateway.listCheckpoints(caller, path.id)))
        )
        .handleRaw("restore", ({ path }) =>
          answer(
            Effect.gen(function* () {
              const caller = yield* CurrentCaller
              const body = yield* readJson(RestorePayload, options.limits)
              return yield* gateway.restoreCheckpoint(caller, path.id, body.checkpointId)
            })
          )
        )
        .handleRaw("events", ({ path, urlParams, headers }) =>
          answer(
            Effect.gen(function* () {
              const caller = yield* CurrentCaller
              // Fail before the response starts when the session is not the caller's.
              yield* gateway.getSession(caller, path.id)
              const afterSeq = headers["last-event-id"] ?? urlParams.after ?? 0
              return tapeResponse(options, gateway.follow(caller, path.id, afterSeq, { approver: true }))
            })
          )
        )
    })
  )

const agents = HttpApiBuilder.group(Api, "agents", (handlers) =>
  Effect.gen(function* () {
    const gateway = yield* Gateway.Gateway
    return handlers.handle("list", () => answer(Effect.flatMap(CurrentCaller, (caller) => gateway.listAgents(caller))))
  })
)

const approvals = (options: HandlerOptions) =>
  HttpApiBuilder.group(Api, "approvals", (handlers) =>
    Effect.gen(function* () {
      const gateway = yield* Gateway.Gateway
      return handlers
        .handle("list", ({ urlParams }) =>
          answer(
            Effect.flatMap(CurrentCaller, (caller) =>
              gateway.listApprovals(caller, {
                status: urlParams.status,
                sessionId: urlParams.sessionId,
                runId: urlParams.runId
              })
            )
          )
        )
        .handle("get", ({ path }) =>
          answer(Effect.flatMap(CurrentCaller, (caller) => gateway.getApproval(caller, path.id)))
        )
        .handleRaw("resolve", ({ path }) =>
          answer(
            Effect.gen(function* () {
              const caller = yield* CurrentCaller
              const body = yield* readJson(ApprovalPayload, options.limits)
              const now = yield* Clock.currentTimeMillis
              return yield* gateway.resolveApproval(caller, {
                approvalId: path.id,
                decision: body.decision,
                scope: body.scope,
                reason: body.reason,
                grantExpiresAt: body.expiresInSeconds === undefined ? undefined : now + body.expiresInSeconds * 1000,
                grantMaxUses: body.maxUses
              })
            })
          )
        )
    })
  )

const grants = HttpApiBuilder.group(Api, "grants", (handlers) =>
  Effect.gen(function* () {
    const gateway = yield* Gateway.Gateway
    return handlers
      .handle("list", () => answer(Effect.flatMap(CurrentCaller, (caller) => gateway.listGrants(caller))))
      .handle("revoke", ({ path }) =>
        answer(Effect.flatMap(CurrentCaller, (caller) => gateway.revokeGrant(caller, path.id)))
      )
  })
)

const journal = HttpApiBuilder.group(Api, "journal", (handlers) =>
  Effect.gen(function* () {
    const gateway = yield* Gateway.Gateway
    return handlers.handle("verify", () =>
      answer(Effect.flatMap(CurrentCaller, (caller) => gateway.verifyJournal(caller)))
    )
  })
)

const health = (options: HandlerOptions) =>
  HttpApiBuilder.group(Api, "health", (handlers) =>
    handlers
      .handle("healthz", () => Effect.succeed({ status: "ok" as const }))
      .handle("readyz", () =>
        Effect.flatMap(options.ready, (ready) =>
          ready ? Effect.succeed({ status: "ready" as const }) : Effect.fail({ status: "starting" as const })
        )
      )
  )

const meta = HttpApiBuilder.group(Api, "meta", (handlers) =>
  Effect.gen(function* () {
    // The Prometheus exporter (OpenTelemetry's SDK) loads on the first scrape, not at start-up.
    const scope = yield* Effect.scope
    const render = yield* Effect.cached(
      Effect.flatMap(
        Effect.promise(() => import("./prometheus.js")),
        (m) => Scope.extend(m.makeRenderer, scope)
      )
    )
    // The document is built on its first request, not at start-up (tens of ms of a cold start).
    const document = yield* Effect.cached(Effect.sync(() => ({ ...OpenApi.fromApi(Api) })))
    return handlers.handle("openapi", () => document).handle("metrics", () => Effect.flatten(render))
  })
)

const openai = (options: HandlerOptions) =>
  HttpApiBuilder.group(Api, "openai", (handlers) =>
    Effect.gen(function* () {
      const gateway = yield* Gateway.Gateway
      return handlers.handleRaw("chatCompletions", chatCompletions(gateway, options))
    })
  )

/** @internal */
export interface AuthOptions {
  readonly tokens: ReadonlyArray<Auth.TokenGrant>
  readonly metricsPublic: boolean
  readonly sessions: CookieSessions
}

/** The three security middlewares over one authenticator. @internal */
export const authentication = (options: AuthOptions) => {
  const authenticate = Auth.makeAuthenticator(options.tokens)
  // The raw header, so every transport parses it alike (`Auth.makeAuthenticator`).
  const caller = Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
    const result = authenticate(request.headers.authorization)
    return "caller" in result ? Effect.succeed(result.caller) : Effect.fail(result.refused)
  })
  return Layer.mergeAll(
    Layer.succeed(Authentication, {
      bearer: () => Effect.mapError(caller, (message) => ({ code: "unauthenticated" as const, message })),
      // Tried when the bearer check fails; without a cookie, the bearer's refusal stands.
      cookie: (value) =>
        Redacted.value(value) === ""
          ? Effect.mapError(caller, (message) => ({ code: "unauthenticated" as const, message }))
          : Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) =>
              options.sessions.authenticate(request, Redacted.value(value))
            )
    }),
    Layer.succeed(OpenAiAuthentication, {
      bearer: () => Effect.mapError(caller, (message) => openAiError(401, message, { code: "unauthenticated" }).body)
    }),
    Layer.succeed(MetricsAuthentication, {
      bearer: () =>
        options.metricsPublic
          ? Effect.void
          : Effect.mapError(Effect.asVoid(caller), (message) => ({ code: "unauthenticated" as const, message }))
    })
  )
}

/** Every group's handlers. Requires `Gateway` and the security middlewares. @internal */
export const handlers = (options: HandlerOptions, auths: AuthOptions) =>
  Layer.mergeAll(
    auth(options, auths.tokens, auths.sessions),
    approvalEvents(options),
    runList,
    runs(options),
    sessions(options),
    agents,
    approvals(options),
    grants,
    journal,
    health(options),
    meta,
    openai(options),
    pairing(options),
    backgroundHandlers(options)
  )
