/**
 * The HTTP transport: the typed API in `Api.ts` served over Node's HTTP server. REST for runs,
 * sessions, approvals, grants and the journal; server-sent events for a session's tape (resume
 * with `Last-Event-ID` = tape_seq); OpenAI-compatible Chat Completions; Prometheus metrics;
 * JSON errors `{ code, message }` with the status from core's error table; bearer-token auth on
 * everything but `/healthz` and `/readyz`; an OpenAPI document derived from the API at
 * `/openapi.json`.
 *
 * Hostile input is refused before it reaches a handler: non-canonical paths (`/v1//runs`,
 * `/v1/runs/`, `/v1/runs;x`, another letter case) are 404, a declared oversize body is 413 before
 * a byte of it is read, and JSON bodies are read with a size limit, strict UTF-8 and a nesting
 * limit (`internal/body.ts`).
 *
 * Thin by design: every Gateway route is one `Gateway` call.
 *
 * @since 0.1.0
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { HttpApiDecodeError } from "@effect/platform/HttpApiError"
import type * as HttpApp from "@effect/platform/HttpApp"
import * as HttpRouter from "@effect/platform/HttpRouter"
import * as HttpServerError from "@effect/platform/HttpServerError"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import type { Auth, Gateway } from "@palyra/core"
import { Cause, Deferred, Effect, Layer, Option, type Scope } from "effect"
import { Api } from "./Api.js"
import { DEFAULT_MAX_DEPTH } from "./internal/body.js"
import * as CookieSession from "./internal/cookieSession.js"
import * as FastRuns from "./internal/fastRuns.js"
import { authentication, handlers } from "./internal/handlers.js"
import { openAiError } from "./internal/openaiErrors.js"
import * as StaticConsole from "./internal/staticConsole.js"

/** @since 0.1.0 @category Models */
export type TokenGrant = Auth.TokenGrant

/** Console sign-in sessions: idle and absolute expiry, `Secure` cookies. @since 0.1.0 @category Models */
export type CookieSessionOptions = CookieSession.CookieSessionOptions

/** @since 0.1.0 @category Models */
export interface Options {
  readonly tokens: ReadonlyArray<TokenGrant>
  /** Largest request body, in bytes (default 1 MiB). */
  readonly maxBodyBytes?: number | undefined
  /** Deepest nesting of a JSON body (default 64). */
  readonly maxJsonDepth?: number | undefined
  /** Seconds between SSE keep-alive comments (default 15). */
  readonly heartbeatSeconds?: number | undefined
  /** Readiness probe (default: always ready). */
  readonly ready?: Effect.Effect<boolean> | undefined
  /** Completes when the server shuts down: open event streams end cleanly then. */
  readonly shutdown?: Effect.Effect<void> | undefined
  /** Serve `GET /metrics` without a token (default false). */
  readonly metricsPublic?: boolean | undefined
  /** How long one chat completion may take, approval waits included, before it ends with a notice (default 300). */
  readonly chatTimeoutSeconds?: number | undefined
  /** Console sign-in sessions (cookie + CSRF token): idle and absolute expiry, `Secure` cookies. */
  readonly cookieSessions?: CookieSessionOptions | undefined
  /**
   * Serve the web console at `/` (and its files at `/assets/*`) from this built folder
   * (`@palyra/console`'s `dist`); `{ dir: undefined }`: `/` explains how to build it. Off when absent.
   */
  readonly console?: { readonly dir: string | undefined } | undefined
}

const json = (status: number, body: unknown) => HttpServerResponse.unsafeJson(body, { status })

/** A refusal before routing, in the shape the route's clients expect. */
const refusal = (path: string, status: 404 | 413 | 500, code: string, message: string) =>
  path.startsWith("/v1/chat/")
    ? json(status, openAiError(status, message, { code }).body)
    : json(status, { code, message })

/** Path segments are unreserved characters and percent escapes only; no empty, `.` or `..` segment. */
const SEGMENT = /^(?:[A-Za-z0-9_~-]|\.|%[0-9A-Fa-f]{2})+$/

/**
 * Whether a request target is one path this server could route exactly: no `;` parameters, no
 * doubled or trailing slash, no dot segments, absolute-path form only.
 */
const isCanonical = (path: string): boolean => {
  if (path === "/") return true
  if (!path.startsWith("/")) return false
  const segments = path.slice(1).split("/")
  return segments.every((s) => SEGMENT.test(s) && s !== "." && s !== "..")
}

/** `HttpApi` answers its own decode failures as `HttpApiDecodeError`; here they are `InvalidArgument` like every other 400. */
const decodeErrorsAsInvalidArgument = HttpApiBuilder.middleware((app) =>
  Effect.catchAllCause(app, (cause) => {
    const failure = Cause.failureOption(cause as Cause.Cause<unknown>)
    if (Option.isSome(failure) && failure.value instanceof HttpApiDecodeError) {
      const first = failure.value.issues[0]
      const where = first === undefined ? "" : first.path.map(String).join(".")
      const message =
        first === undefined ? "the request is malformed" : where ? `${where}: ${first.message}` : first.message
      return Effect.succeed(json(400, { code: "invalid_argument", message }))
    }
    return Effect.failCause(cause)
  })
)

/**
 * Refuse what must never reach a route (non-canonical paths, declared oversize bodies) and answer
 * whatever the API could not encode (unknown routes, defects) as JSON.
 */
const guard =
  (maxBodyBytes: number) =>
  <E, R>(app: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>) =>
    Effect.gen(function* () {
      const request = yield* HttpServerRequest.HttpServerRequest
      const path = request.url.split("?", 1)[0] ?? ""
      if (!isCanonical(path)) return refusal(path, 404, "not_found", "no such route")
      const declared = Number(request.headers["content-length"] ?? 0)
      if (declared > maxBodyBytes) {
        // The body is never read, so this connection cannot carry another request.
        return HttpServerResponse.setHeader(
          refusal(
            path,
            413,
            "payload_too_large",
            `request body is ${declared} bytes, over the limit of ${maxBodyBytes}`
          ),
          "connection",
          "close"
        )
      }
      return yield* app.pipe(
        Effect.catchAllCause((cause) => {
          if (Cause.isInterruptedOnly(cause)) return Effect.failCause(cause)
          const failure = Cause.failureOption(cause as Cause.Cause<unknown>)
          if (Option.isSome(failure) && HttpServerError.isServerError(failure.value)) {
            if (failure.value._tag === "RouteNotFound")
              return Effect.succeed(refusal(path, 404, "not_found", "no such route"))
          }
          return Effect.as(Effect.logError("request failed", cause), refusal(path, 500, "internal", "internal error"))
        })
      )
    })

/**
 * The whole API as an `HttpApp`, to serve with any `HttpServer` (see `serve`) or embed (e.g.
 * `NodeHttpServer.makeHandler`). Requires `Gateway`; its resources (the metrics exporter) live
 * until the scope closes.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const httpApp = (options: Options): Effect.Effect<HttpApp.Default, never, Gateway.Gateway | Scope.Scope> =>
  makeApp(options, false)

// `rawStreams`: served by `serve` on its own Node server (see `HandlerOptions.rawStreams`).
const makeApp = (
  options: Options,
  rawStreams: boolean
): Effect.Effect<HttpApp.Default, never, Gateway.Gateway | Scope.Scope> =>
  Effect.gen(function* () {
    const maxBytes = options.maxBodyBytes ?? 1024 * 1024
    const auths = {
      tokens: options.tokens,
      metricsPublic: options.metricsPublic ?? false,
      sessions: CookieSession.make(options.cookieSessions)
    }
    const api = HttpApiBuilder.api(Api).pipe(
      Layer.provide(
        handlers(
          {
            limits: { maxBytes, maxDepth: options.maxJsonDepth ?? DEFAULT_MAX_DEPTH },
            heartbeatSeconds: options.heartbeatSeconds ?? 15,
            ready: options.ready ?? Effect.succeed(true),
            shutdown: options.shutdown ?? Effect.never,
            chatTimeoutSeconds: options.chatTimeoutSeconds ?? 300,
            rawStreams
          },
          auths
        )
      ),
      Layer.provide(authentication(auths))
    )
    const context = yield* Layer.build(
      Layer.mergeAll(api, decodeErrorsAsInvalidArgument).pipe(
        Layer.provideMerge(Layer.mergeAll(HttpApiBuilder.Router.Live, HttpApiBuilder.Middleware.layer)),
        Layer.merge(NodeHttpServer.layerContext)
      )
    )
    const app = yield* HttpApiBuilder.httpApp.pipe(
      // Exact routing: letter case, trailing and doubled slashes all matter.
      HttpRouter.withRouterConfig({ caseSensitive: true, ignoreTrailingSlash: false, ignoreDuplicateSlashes: false }),
      Effect.provide(context)
    )
    const routes = Effect.provide(app, context)
    if (options.console === undefined) return guard(maxBytes)(routes)
    const site = StaticConsole.load(options.console.dir)
    const withConsole = Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
      const path = request.url.split("?", 1)[0] ?? ""
      return StaticConsole.handles(path)
        ? Effect.succeed(StaticConsole.respond(site, request.method, path, request.headers["accept-encoding"]))
        : routes
    })
    return guard(maxBytes)(withConsole)
  })

/** @since 0.1.0 @category Models */
export interface ServeOptions extends Options {
  /** Default 127.0.0.1: pass `0.0.0.0` deliberately to listen on every interface. */
  readonly host?: string | undefined
  /** 0 picks a free port. */
  readonly port: number
}

/**
 * Serve the API on a Node HTTP server until the scope closes; returns the bound URL.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const serve = (options: ServeOptions) =>
  Effect.gen(function* () {
    const host = options.host ?? "127.0.0.1"
    const node = createServer()
    const server = yield* NodeHttpServer.make(() => node, { host, port: options.port })
    // Shutdown (finalizers run in reverse, so this runs before the server's own close): end open
    // event streams cleanly, give responses a moment to flush, then drop whatever is still open so
    // closing never waits on a long-lived client.
    const closing = yield* Deferred.make<void>()
    yield* Effect.addFinalizer(() =>
      Deferred.succeed(closing, undefined).pipe(
        Effect.zipRight(Effect.sleep("100 millis")),
        Effect.zipRight(Effect.sync(() => node.closeAllConnections()))
      )
    )
    const shutdown = Deferred.await(closing)
    const app = yield* makeApp({ ...options, shutdown }, true)
    yield* server.serve(app)
    // The hot route (`POST /v1/runs?stream=true`) answered straight from Node when it can be answered
    // exactly like the app would; everything else goes on to the app's listener (`internal/fastRuns.ts`).
    const fast = yield* FastRuns.make(
      {
        limits: { maxBytes: options.maxBodyBytes ?? 1024 * 1024, maxDepth: options.maxJsonDepth ?? DEFAULT_MAX_DEPTH },
        heartbeatSeconds: options.heartbeatSeconds ?? 15,
        ready: options.ready ?? Effect.succeed(true),
        shutdown,
        chatTimeoutSeconds: options.chatTimeoutSeconds ?? 300
      },
      options.tokens
    )
    const toApp = node.listeners("request") as Array<(req: IncomingMessage, res: ServerResponse) => void>
    node.removeAllListeners("request")
    node.on("request", (req: IncomingMessage, res: ServerResponse) => {
      if (!fast(req, res)) for (const listener of toApp) listener(req, res)
    })
    const address = server.address
    const port = address._tag === "TcpAddress" ? address.port : options.port
    const shownHost = host.includes(":") ? `[${host}]` : host
    return { url: `http://${shownHost}:${port}`, port }
  })
