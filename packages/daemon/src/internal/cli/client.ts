/**
 * The CLI's connection to palyrad: a client derived from the HTTP contract (`HttpApiClient.make`
 * over `Api`), the bearer token from `--token`, `PALYRA_TOKEN` or the data dir's admin token file,
 * and the two event streams (a streamed run, a session's events) read through the shared SSE parser
 * and decoded as `TapeEvent`s. Every failure becomes one of the CLI's exit-code failures.
 */
import { existsSync, readFileSync } from "node:fs"
import { join, resolve } from "node:path"
import * as Options from "@effect/cli/Options"
import * as HttpApiClient from "@effect/platform/HttpApiClient"
import type * as HttpApiError from "@effect/platform/HttpApiError"
import * as HttpClient from "@effect/platform/HttpClient"
import type * as HttpClientError from "@effect/platform/HttpClientError"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import * as HttpClientResponse from "@effect/platform/HttpClientResponse"
import { type Ids, TapeEvent } from "@palyra/core"
import { Api, Sse } from "@palyra/transport-http"
import { Config, Effect, Option, type ParseResult, Redacted, Schema, Stream } from "effect"
import * as DaemonConfig from "../../Config.js"
import { CliEnv, type CliFailure, Failed, TokenRefused, Unreachable } from "./io.js"

/** @internal */
export const DEFAULT_URL = "http://127.0.0.1:7420"

/**
 * The connection flags every command that talks to palyrad takes (after the command name, e.g.
 * `palyra sessions list --token …`), with their environment fallbacks.
 * @internal
 */
export const connectionOptions = {
  url: Options.text("url").pipe(
    Options.withPseudoName("URL"),
    Options.withDescription(`palyrad's HTTP address (env PALYRA_URL; default ${DEFAULT_URL})`),
    Options.withFallbackConfig(Config.string("PALYRA_URL")),
    Options.withDefault(DEFAULT_URL)
  ),
  token: Options.redacted("token").pipe(
    Options.withPseudoName("TOKEN"),
    Options.withDescription("bearer token (env PALYRA_TOKEN; default: the admin token file in the data dir)"),
    Options.withFallbackConfig(Config.redacted("PALYRA_TOKEN")),
    Options.optional
  ),
  dataDir: Options.text("data-dir").pipe(
    Options.withPseudoName("DIR"),
    Options.withDescription("palyrad's data dir, for its admin.token (default: as palyrad resolves it, else .palyra)"),
    Options.optional
  )
}

/** @internal */
export interface Connection {
  readonly url: string
  readonly token: Option.Option<Redacted.Redacted<string>>
  readonly dataDir: Option.Option<string>
}

/** The data dir as palyrad resolves it (config file, PALYRA_DATA_DIR, PALYRA_HOME, `--data-dir`). @internal */
export const resolveDataDir = (dataDir: Option.Option<string>) =>
  Effect.flatMap(CliEnv, ({ env, cwd }) =>
    DaemonConfig.load({ dataDir: Option.getOrUndefined(dataDir) }, env, cwd).pipe(
      Effect.map((config) => config.dataDir),
      Effect.orElseSucceed(() =>
        resolve(
          cwd,
          Option.getOrElse(dataDir, () => ".palyra")
        )
      )
    )
  )

const tokenOf = (connection: Connection): Effect.Effect<string, TokenRefused, CliEnv> =>
  Effect.gen(function* () {
    const given = Option.filter(Option.map(connection.token, Redacted.value), (t) => t.length > 0)
    if (Option.isSome(given)) return given.value
    const file = join(yield* resolveDataDir(connection.dataDir), "admin.token")
    if (existsSync(file)) return readFileSync(file, "utf8").trim()
    return yield* new TokenRefused({
      message: `no token: pass --token, set PALYRA_TOKEN, or run where ${file} exists`
    })
  })

const makeApi = (url: string, token: string) =>
  HttpApiClient.make(Api.Api, {
    baseUrl: url,
    transformClient: HttpClient.mapRequest(HttpClientRequest.bearerToken(token))
  })

/** The typed client of the whole HTTP API. @internal */
export type ApiClient = Effect.Effect.Success<ReturnType<typeof makeApi>>

/** Whatever a contract call can fail with. @internal */
export type CallError =
  | Api.ApiError
  | HttpApiError.HttpApiDecodeError
  | HttpClientError.HttpClientError
  | HttpClientError.ResponseError
  | ParseResult.ParseError

/** A call's failure as an exit-code failure. @internal */
export const toFailure =
  (url: string) =>
  (error: CallError): CliFailure => {
    if ("code" in error) {
      return error.code === "unauthenticated"
        ? new TokenRefused({ message: "the daemon refused the token (401): check --token / PALYRA_TOKEN" })
        : new Failed({ message: `${error.code}: ${error.message}` })
    }
    switch (error._tag) {
      case "RequestError":
        return new Unreachable({
          message: `cannot reach palyrad at ${url} (is it running? start it with \`palyrad\`)`
        })
      case "ResponseError":
        return new Failed({ message: `palyrad answered ${error.response.status}: ${error.message}` })
      case "HttpApiDecodeError":
      case "ParseError":
        return new Failed({ message: `unexpected answer from palyrad: ${error.message}` })
    }
  }

const decodeEvent = Schema.decode(Schema.parseJson(TapeEvent.TapeEvent))

/** A daemon connection: contract calls and event streams. @internal */
export interface Daemon {
  readonly url: string
  /** Call the contract with the token (which must be found). */
  readonly call: <A>(f: (api: ApiClient) => Effect.Effect<A, CallError>) => Effect.Effect<A, CliFailure, CliEnv>
  /** Health routes need no token. */
  readonly ready: Effect.Effect<boolean, CliFailure>
  /** Send a message and stream the run's events. */
  readonly streamRun: (
    payload: typeof Api.MessagePayload.Type
  ) => Stream.Stream<TapeEvent.TapeEvent, CliFailure, CliEnv>
  /** A session's tape from the start, then live. */
  readonly follow: (sessionId: Ids.SessionId) => Stream.Stream<TapeEvent.TapeEvent, CliFailure, CliEnv>
}

/** @internal */
export const connect = (connection: Connection): Effect.Effect<Daemon, never, HttpClient.HttpClient> =>
  Effect.gen(function* () {
    const url = connection.url.replace(/\/+$/, "")
    const http = yield* HttpClient.HttpClient
    const fail = toFailure(url)
    const api = tokenOf(connection).pipe(Effect.flatMap((token) => makeApi(url, token)))
    const call: Daemon["call"] = (f) =>
      api.pipe(
        Effect.flatMap((client) => Effect.mapError(f(client), fail)),
        Effect.provideService(HttpClient.HttpClient, http)
      )
    const ready = makeApi(url, "").pipe(
      Effect.flatMap((anonymous) => anonymous.health.readyz()),
      Effect.as(true),
      // 503 `{ status: "starting" }`: up, not ready yet.
      Effect.catchAll((error) => ("status" in error ? Effect.succeed(false) : Effect.fail(fail(error)))),
      Effect.provideService(HttpClient.HttpClient, http)
    )
    const stream = (request: (token: string) => Effect.Effect<HttpClientRequest.HttpClientRequest, CliFailure>) =>
      Stream.unwrap(
        Effect.gen(function* () {
          const token = yield* tokenOf(connection)
          const req = yield* request(token)
          const response = yield* Effect.mapError(http.execute(req), fail)
          if (response.status !== 200) {
            const body = yield* HttpClientResponse.schemaBodyJson(Api.ApiError)(response).pipe(
              Effect.mapError(() => new Failed({ message: `palyrad answered ${response.status}` }))
            )
            return yield* Effect.fail(fail(body))
          }
          return Sse.decode(response.stream).pipe(
            Stream.mapError(fail),
            Stream.mapEffect((event) =>
              Effect.mapError(
                decodeEvent(event.data),
                (e) => new Failed({ message: `unexpected event from palyrad: ${e.message}` })
              )
            )
          )
        })
      )
    const authorized = (token: string) => (req: HttpClientRequest.HttpClientRequest) =>
      req.pipe(HttpClientRequest.prependUrl(url), HttpClientRequest.bearerToken(token))
    return {
      url,
      call,
      ready,
      streamRun: (payload) =>
        stream((token) =>
          HttpClientRequest.post("/v1/runs", { urlParams: { stream: "true" } }).pipe(
            authorized(token),
            HttpClientRequest.schemaBodyJson(Api.MessagePayload)(payload),
            Effect.mapError((e) => new Failed({ message: `cannot encode the message (${e.reason._tag})` }))
          )
        ),
      follow: (sessionId) =>
        stream((token) =>
          Effect.succeed(
            HttpClientRequest.get(`/v1/sessions/${encodeURIComponent(sessionId)}/events`).pipe(authorized(token))
          )
        )
    }
  })
