/**
 * palyrad's assembly: journal, policies, tools, model, Gateway and the HTTP server, in one scope.
 * Closing the scope (SIGINT/SIGTERM) stops accepting requests, parks runs at a safe point (their
 * state is on the tape), lets the journal commit what is queued, and closes it.
 *
 * @since 0.1.0
 */
import { randomBytes } from "node:crypto"
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { ChannelConfig } from "@palyra/channels/config"
import { type Auth, Errors, Journal, Metrics, PolicyEngine } from "@palyra/core"
import { CedarPolicy } from "@palyra/core/cedar"
import { ContextEngine } from "@palyra/core/context"
import { Models } from "@palyra/core/models"
import { BuiltinTools } from "@palyra/core/tools"
import { Anchor, SqliteBlobStore, SqliteJournal } from "@palyra/journal"
import * as GrpcServer from "@palyra/transport-grpc/lazy"
import { HttpTransport } from "@palyra/transport-http"
import {
  Context,
  Deferred,
  Duration,
  Effect,
  Exit,
  FiberRef,
  FiberRefs,
  HashMap,
  Layer,
  Logger,
  LogLevel,
  Option,
  Tracer
} from "effect"
import type { Config } from "./Config.js"
import { afterRunOf } from "./internal/afterRun.js"
import { agentsOf, budgetsOf } from "./internal/agents.js"
import { consoleAssetsDir } from "./internal/consoleAssets.js"
import { withReferences } from "./internal/context.js"
import * as MemoryReducer from "./internal/memoryReducer.js"

/** The admin token: from config, or generated once and kept (mode 0600) in the data dir. @since 0.1.0 @category Auth */
export const ensureAdminToken = (config: Config) =>
  Effect.sync(() => {
    if (config.auth.admin_token) return { token: config.auth.admin_token, generated: false, file: undefined }
    const file = join(config.dataDir, "admin.token")
    if (existsSync(file)) return { token: readFileSync(file, "utf8").trim(), generated: false, file }
    const token = `plt_${randomBytes(32).toString("base64url")}`
    writeFileSync(file, `${token}\n`, { mode: 0o600 })
    chmodSync(file, 0o600)
    return { token, generated: true, file }
  })

/** Secrets the redactor should remove wherever they appear: provider keys from the environment. */
const envSecrets = (env: Record<string, string | undefined>) =>
  Object.entries(env)
    .filter(([k, v]) => v !== undefined && v.length >= 8 && /(_API_KEY|_TOKEN|_SECRET|PASSWORD)$/.test(k))
    .map(([, v]) => v!)

/**
 * A logger that annotates each line written inside a span with the span's `traceId` and `spanId`
 * (what a log search needs to jump to the trace). Outside a span, lines are unchanged.
 *
 * @since 0.1.0
 * @category Logging
 */
export const withTraceIds = <Message, Output>(logger: Logger.Logger<Message, Output>): Logger.Logger<Message, Output> =>
  Logger.mapInputOptions(logger, (options) => {
    const span = Option.flatMap(FiberRefs.get(options.context, FiberRef.currentContext), (context) =>
      Context.getOption(context, Tracer.ParentSpan)
    )
    if (Option.isNone(span)) return options
    const annotations = HashMap.set(
      HashMap.set(options.annotations, "traceId", span.value.traceId as unknown),
      "spanId",
      span.value.spanId
    )
    return { ...options, annotations }
  })

/** The logger layer for the configured format (pretty on a terminal, JSON otherwise). @since 0.1.0 @category Logging */
export const loggerLayer = (config: Config, isTty = Boolean(process.stdout.isTTY)) => {
  const format = config.log.format === "auto" ? (isTty ? "pretty" : "json") : config.log.format
  const level = { debug: LogLevel.Debug, info: LogLevel.Info, warning: LogLevel.Warning, error: LogLevel.Error }[
    config.log.level
  ]
  const json = Logger.replace(Logger.defaultLogger, Logger.withConsoleLog(withTraceIds(Logger.jsonLogger)))
  return Layer.merge(format === "json" ? json : Logger.pretty, Logger.minimumLogLevel(level))
}

/**
 * The tracer: with `[telemetry] otlp_endpoint` set, spans are exported over OTLP/HTTP (JSON) and the
 * buffer is flushed when the layer closes; without it, nothing telemetry-related is loaded (the
 * exporter module is imported on demand) and Effect's built-in tracer stays in place.
 *
 * @since 0.1.0
 * @category Telemetry
 */
export const telemetryLayer = (config: Config): Layer.Layer<never> => {
  const { otlp_endpoint: endpoint, service_name, headers, sample_ratio } = config.telemetry
  if (endpoint === undefined) return Layer.empty
  return Layer.unwrapEffect(
    Effect.map(
      Effect.promise(() => import("./internal/telemetry.js")),
      (telemetry) =>
        telemetry.layer({
          endpoint,
          serviceName: service_name,
          headers,
          sampleRatio: sample_ratio,
          shutdownTimeout: Duration.seconds(Math.min(3, config.shutdown_timeout_seconds))
        })
    )
  )
}

/**
 * Run the daemon until interrupted. `onReady` receives the bound URL and whether the admin token
 * was just generated (so the binary can print it once).
 *
 * @since 0.1.0
 * @category Main
 */
export const run = (
  config: Config,
  onReady: (info: {
    readonly url: string
    readonly grpcUrl: string
    readonly token: string
    readonly generated: boolean
    readonly tokenFile: string | undefined
  }) => void,
  env: Record<string, string | undefined> = process.env
): Effect.Effect<void, unknown> =>
  Effect.gen(function* () {
    mkdirSync(config.dataDir, { recursive: true, mode: 0o700 })
    mkdirSync(config.workspaceDir, { recursive: true })
    const admin = yield* ensureAdminToken(config)
    // If the journal's writer thread dies every write fails from then on: stop (with an error, so a
    // supervisor restarts the daemon) instead of answering every request with 500.
    const writerStopped = yield* Deferred.make<never, Errors.JournalError>()
    const onWriterStopped = (reason: string) =>
      Deferred.unsafeDone(
        writerStopped,
        Exit.fail(new Errors.JournalError({ method: "writer", message: `the journal's writer stopped: ${reason}` }))
      )
    const model = yield* Models.fromSpecs(config.models, env)
    const policies = config.policiesDir
      ? yield* CedarPolicy.readPolicyDirectory(config.policiesDir)
      : CedarPolicy.defaultPolicies
    const engine = yield* CedarPolicy.make({ policies })
    const sh = config.shell
    const tools = BuiltinTools.all({
      workspace: config.workspaceDir,
      http: {
        allowHosts: config.http_fetch.allow_hosts,
        allowPrivateNetworks: config.http_fetch.allow_private_networks
      },
      shell: { timeoutMs: sh.timeout_seconds * 1000 },
      sandbox: {
        tier: sh.sandbox,
        ...(sh.allow_executables ? { allowExecutables: sh.allow_executables } : {}),
        ...(sh.allow_interpreters ? { allowInterpreters: sh.allow_interpreters } : {}),
        network: sh.network,
        workspace: sh.workspace_access,
        limits: {
          ...(sh.cpu_seconds ? { cpuSeconds: sh.cpu_seconds } : {}),
          ...(sh.memory_mb ? { memoryBytes: sh.memory_mb * 1024 * 1024 } : {}),
          ...(sh.file_mb ? { fileBytes: sh.file_mb * 1024 * 1024 } : {}),
          ...(sh.processes ? { processes: sh.processes } : {})
        }
      }
    })
    // WebAssembly plugin tools, when configured (loaded lazily: Extism only when there are plugins).
    // A plugin that does not load stops start-up with one message naming its file.
    const pluginTools = config.pluginsDir
      ? yield* Effect.promise(() => import("@palyra/plugins")).pipe(
          Effect.flatMap(({ Plugins }) =>
            Plugins.loadDirectory(config.pluginsDir!, {
              workspace: config.workspaceDir,
              http: {
                allowHosts: config.http_fetch.allow_hosts,
                allowPrivateNetworks: config.http_fetch.allow_private_networks
              }
            })
          ),
          Effect.tap((loaded) =>
            Effect.logInfo("plugins loaded").pipe(
              Effect.annotateLogs(
                "tools",
                loaded.map((t) => t.name)
              )
            )
          )
        )
      : []
    const redaction = {
      literals: [
        ...envSecrets(env),
        admin.token,
        ...config.auth.tokens.map((t) => t.token),
        ...Object.values(config.telemetry.headers).filter((v) => v.length >= 8),
        ...ChannelConfig.secrets(config.channels)
      ]
    }
    const cx = config.context
    // Message attachments live in the journal's file (content-addressed, outside the tape).
    const blobs = yield* SqliteBlobStore.make({ filename: join(config.dataDir, "journal.db") })
    // Memory, learning, the background worker and the watchdog ([memory], [learning], [watchdog], [tasks]).
    const afterRun = yield* afterRunOf(config, redaction, env)
    const kernel = afterRun.kernelLayer({
      model,
      tools: [...tools, ...pluginTools],
      blobs,
      attachments: { images: cx.images },
      // Window-aware prompts and compaction with checkpoints (`[context] enabled = false` to turn off).
      ...(cx.enabled
        ? {
            promptAssembler: withReferences(
              config,
              engine,
              model.name,
              ContextEngine.layer({
                autoCompact: cx.auto_compact,
                ...(cx.context_window ? { contextWindow: cx.context_window } : {}),
                ...(cx.keep_turns ? { keepTurns: cx.keep_turns } : {}),
                ...(cx.facts_file ? { factsFile: { root: config.workspaceDir, file: cx.facts_file } } : {})
              })
            )
          }
        : {}),
      // Signed anchors of the journal's chain heads (a witness file beside it, and the log); the
      // anchor writes its last checkpoint at shutdown, before the journal closes.
      journal: Anchor.layer({
        keyFile: config.anchorKeyFile,
        witnessFile: config.anchorWitnessFile,
        every: Duration.seconds(config.anchor.every_seconds)
      }).pipe(
        Layer.provideMerge(
          SqliteJournal.layer({ filename: join(config.dataDir, "journal.db"), redaction, onWriterStopped })
        )
      ),
      // Streamed model text is redacted with the same rules as what the journal stores.
      redaction,
      policy: Layer.succeed(PolicyEngine.PolicyEngine, engine),
      instructions: config.instructions,
      approvalTimeout: Duration.seconds(config.approvals.timeout_seconds),
      budgets: budgetsOf(config.budgets),
      agents: yield* agentsOf(config.agents, env),
      bindings: config.bindings
    })

    const tokens: ReadonlyArray<Auth.TokenGrant> = [
      { token: admin.token, principal: "operator", operator: true },
      ...config.auth.tokens
    ]
    yield* Effect.gen(function* () {
      // Chat platforms (when configured): their router reaches the Gateway as each paired principal.
      // Built before the HTTP server, whose /v1/pairing routes use the Pairing port they provide.
      const channels =
        config.channels.length > 0
          ? yield* Effect.promise(() => import("@palyra/channels")).pipe(
              // Loaded only when configured: the connectors (grammY, Slack's client) cost start-up time and memory.
              Effect.flatMap(({ Channels }) =>
                Layer.build(
                  Channels.layer({
                    channels: config.channels,
                    store: { filename: join(config.dataDir, "channels.sqlite") }
                  })
                )
              )
            )
          : Context.empty()
      const { url } = yield* HttpTransport.serve({
        host: config.server.host,
        port: config.server.http_port,
        maxBodyBytes: config.server.max_body_bytes,
        tokens,
        console: config.console.enabled ? { dir: consoleAssetsDir() } : undefined,
        cookieSessions: {
          idleSeconds: config.console.session_idle_seconds,
          absoluteSeconds: config.console.session_max_seconds,
          secureCookies: config.console.secure_cookies
        }
      }).pipe(Effect.provide(channels))
      // The gRPC services (generated code, connect-es) load on the first gRPC request.
      const grpc = yield* GrpcServer.serve({
        host: config.server.host,
        port: config.server.grpc_port,
        maxMessageBytes: config.server.max_body_bytes,
        tokens
      }).pipe(Effect.provide(channels))
      if (config.policiesDir) yield* CedarPolicy.watchDirectory(engine, config.policiesDir)
      yield* Metrics.monitorEventLoop()
      yield* Effect.forkScoped(MemoryReducer.run()) // memory back to the OS once quiet after work
      const journalService = yield* Journal.Journal
      const interrupted = yield* journalService.listRuns({ states: ["WaitingForApproval"] })
      yield* Effect.logInfo("palyrad ready").pipe(
        Effect.annotateLogs({
          url,
          grpc: grpc.url,
          model: model.name,
          workspace: config.workspaceDir,
          journal: join(config.dataDir, "journal.db"),
          waitingForApproval: interrupted.length,
          ...(config.telemetry.otlp_endpoint === undefined ? {} : { telemetry: config.telemetry.otlp_endpoint })
        })
      )
      onReady({ url, grpcUrl: grpc.url, token: admin.token, generated: admin.generated, tokenFile: admin.file })
      return yield* Deferred.await(writerStopped)
    }).pipe(Effect.provide(afterRun.layer.pipe(Layer.provideMerge(kernel))))
    // The tracer wraps everything, so its final flush runs after the servers and runs have stopped.
  }).pipe(Effect.scoped, Effect.provide(telemetryLayer(config)))
