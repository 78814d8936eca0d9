/**
 * palyrad's configuration: a TOML file, overridden by `PALYRA_*` environment variables, overridden
 * by command-line flags; validated with Schema at start-up. A bad value is one clear error naming
 * the key (`server.http_port: …`).
 *
 * @since 0.1.0
 */

import { existsSync, readFileSync } from "node:fs"
import { validateHeaderName, validateHeaderValue } from "node:http"
import { dirname, isAbsolute, join, resolve } from "node:path"
import { ChannelConfig } from "@palyra/channels/config"
import { Agent } from "@palyra/core"
import { Data, Effect, Either, ParseResult, Schema } from "effect"
import { parse as parseToml } from "smol-toml"

const Port = Schema.Int.pipe(Schema.between(0, 65535, { message: () => "must be a port number (0–65535)" }))
const Positive = Schema.Int.pipe(Schema.positive({ message: () => "must be a positive whole number" }))

const TokenEntry = Schema.Struct({
  token: Schema.String.pipe(Schema.minLength(16, { message: () => "must be at least 16 characters" })),
  principal: Schema.String.pipe(Schema.minLength(1)),
  operator: Schema.optionalWith(Schema.Boolean, { default: () => false })
})

/** Node's own header checks (what its HTTP client enforces), as a predicate. */
const acceptedBy = (check: (value: string) => void) => (value: string) => {
  try {
    check(value)
    return true
  } catch {
    return false
  }
}

/** An http(s) URL without credentials (they belong in `telemetry.headers`), parsed by WHATWG `URL`. */
const HttpUrl = Schema.String.pipe(
  Schema.filter((value) => {
    const url = URL.parse(value)
    if (url === null || (url.protocol !== "http:" && url.protocol !== "https:"))
      return "must be an http:// or https:// URL"
    if (url.username !== "" || url.password !== "") return "must not carry credentials (put them in telemetry.headers)"
    return true
  })
)
const HeaderValue = Schema.String.pipe(
  Schema.filter(
    acceptedBy((value) => validateHeaderValue("x", value)),
    {
      message: () => "must be a valid HTTP header value"
    }
  )
)

// Names are checked on the whole table so a bad one is reported as such (a failing key schema
// would make it an "unknown setting").
const isHeaderName = acceptedBy((name) => validateHeaderName(name))
const Headers = Schema.Record({ key: Schema.String, value: HeaderValue }).pipe(
  Schema.filter((headers) => {
    const bad = Object.keys(headers).find((name) => !isHeaderName(name))
    return bad === undefined || { path: [bad], message: "must be a valid HTTP header name" }
  })
)

/**
 * `[telemetry]`: export traces over OTLP/HTTP. Off unless `otlp_endpoint` (or `PALYRA_OTLP_ENDPOINT`)
 * is set; the endpoint is the collector's base URL (`/v1/traces` is appended).
 *
 * @since 0.1.0
 * @category Schema
 */
export const TelemetrySection = Schema.Struct({
  otlp_endpoint: Schema.optional(HttpUrl),
  service_name: Schema.optionalWith(Schema.String.pipe(Schema.minLength(1, { message: () => "must not be empty" })), {
    default: () => "palyrad"
  }),
  headers: Schema.optionalWith(Headers, { default: () => ({}) }),
  sample_ratio: Schema.optionalWith(
    Schema.Number.pipe(Schema.between(0, 1, { message: () => "must be a number from 0 to 1" })),
    { default: () => 1 }
  )
})
/** @since 0.1.0 @category Schema */
export type TelemetrySection = typeof TelemetrySection.Type

const ModelSpecs = Schema.Union(Schema.String, Schema.Array(Schema.String))

/** `[budgets]`, and each agent's `[agents.budgets]`. @since 0.1.0 @category Schema */
export const BudgetsSection = Schema.Struct({
  max_model_turns: Schema.optional(Positive),
  max_tool_calls: Schema.optional(Positive),
  max_events_per_turn: Schema.optional(Positive),
  wall_clock_seconds: Schema.optional(Positive),
  max_tokens_per_run: Schema.optional(Positive),
  max_tokens_per_session: Schema.optional(Positive)
})
/** @since 0.1.0 @category Schema */
export type BudgetsSection = typeof BudgetsSection.Type

/**
 * `[[agents]]`: an agent with its own instructions, model (a spec, or a list that fails over in
 * order), tools (names, `ns.*` or `*`; default all), budgets (over `[budgets]`) and an optional
 * usage rule (`[agents.routing]`: past `threshold` of the session token budget, `model` answers).
 * An agent with id `default` replaces the top-level `model`/`instructions` for sessions that name none.
 *
 * @since 0.1.0
 * @category Schema
 */
export const AgentEntry = Schema.Struct({
  id: Agent.AgentId,
  description: Schema.optional(Schema.String),
  instructions: Schema.optional(Schema.String),
  model: Schema.optional(ModelSpecs),
  tools: Schema.optional(Schema.Array(Schema.String)),
  budgets: Schema.optional(BudgetsSection),
  routing: Schema.optional(
    Schema.Struct({
      threshold: Schema.Number.pipe(
        Schema.greaterThan(0, { message: () => "must be a share of the token budget, above 0 and at most 1" }),
        Schema.lessThanOrEqualTo(1, { message: () => "must be a share of the token budget, above 0 and at most 1" })
      ),
      model: ModelSpecs
    })
  )
})
/** @since 0.1.0 @category Schema */
export type AgentEntry = typeof AgentEntry.Type

/**
 * `[[bindings]]`: new sessions of a channel's conversations (optionally only one `account` or one
 * `conversation`) are answered by `agent` when the message names none. The most specific wins.
 *
 * @since 0.1.0
 * @category Schema
 */
export const BindingEntry = Schema.Struct({
  channel: Schema.String.pipe(Schema.minLength(1, { message: () => "must not be empty" })),
  account: Schema.optional(Schema.String),
  conversation: Schema.optional(Schema.String),
  agent: Agent.AgentId
})
/** @since 0.1.0 @category Schema */
export type BindingEntry = typeof BindingEntry.Type

const Bps = Schema.Int.pipe(Schema.between(0, 10_000, { message: () => "must be basis points (0–10000)" }))

/** `[memory]`, `[learning]`, `[watchdog]` and `[tasks]`: the daemon's after-run life (`@palyra/core/memory`). */
const AfterRunSections = {
  /** Memory across sessions: injected into prompts, and the `memory.search` / `memory.save` tools. */
  memory: Schema.optionalWith(
    Schema.Struct({
      enabled: Schema.optionalWith(Schema.Boolean, { default: () => true }),
      /** Tokens the injected memory block may take in each prompt. */
      inject_budget_tokens: Schema.optionalWith(Positive, { default: () => 512 }),
      /** Items injected at most. */
      inject_max_items: Schema.optionalWith(Positive, { default: () => 5 }),
      /** Save what users say as notes when their runs end (off: only tools and learning write memory). */
      auto_ingest: Schema.optionalWith(Schema.Boolean, { default: () => false }),
      /** Give the model `memory.search` and `memory.save` (the latter asks for approval by default). */
      tools: Schema.optionalWith(Schema.Boolean, { default: () => true }),
      /** Vectors: `openai:<model>` or `openai-compatible:<baseURL>#<model>`; search blends cosine in. */
      embedding_model: Schema.optional(Schema.String.pipe(Schema.minLength(1))),
      /** Weight of the cosine in the blended score (0–1). */
      vector_weight: Schema.optionalWith(Schema.Number.pipe(Schema.between(0, 1)), { default: () => 0.4 })
    }),
    {
      default: () => ({
        enabled: true,
        inject_budget_tokens: 512,
        inject_max_items: 5,
        auto_ingest: false,
        tools: true,
        vector_weight: 0.4
      })
    }
  ),
  /** Post-run reflection: candidates at or above the threshold are saved, the others wait for review. */
  learning: Schema.optionalWith(
    Schema.Struct({
      enabled: Schema.optionalWith(Schema.Boolean, { default: () => true }),
      auto_write_threshold_bps: Schema.optionalWith(Bps, { default: () => 8_000 }),
      min_confidence_bps: Schema.optionalWith(Bps, { default: () => 3_000 }),
      /** `session`: the default agent's model reflects (the deterministic extractor when it fails). */
      model: Schema.optionalWith(Schema.Literal("session", "deterministic"), {
        default: () => "deterministic" as const
      })
    }),
    {
      default: () => ({
        enabled: true,
        auto_write_threshold_bps: 8_000,
        min_confidence_bps: 3_000,
        model: "deterministic" as const
      })
    }
  ),
  /** Incidents for stuck runs, lost task leases and waiting approvals; `auto` also remediates. */
  watchdog: Schema.optionalWith(
    Schema.Struct({
      mode: Schema.optionalWith(Schema.Literal("off", "observe", "auto"), { default: () => "observe" as const }),
      interval_seconds: Schema.optionalWith(Positive, { default: () => 15 }),
      run_stall_seconds: Schema.optionalWith(Positive, { default: () => 600 }),
      approval_warn_seconds: Schema.optionalWith(Positive, { default: () => 300 }),
      /** A tool process group running this long is orphaned (killed in `auto`) even while its call runs. */
      process_max_seconds: Schema.optionalWith(Positive, { default: () => 7_200 })
    }),
    {
      default: () => ({
        mode: "observe" as const,
        interval_seconds: 15,
        run_stall_seconds: 600,
        approval_warn_seconds: 300,
        process_max_seconds: 7_200
      })
    }
  ),
  /** The background queue's worker (reflections, memory purges). */
  tasks: Schema.optionalWith(
    Schema.Struct({
      /** Tasks of a kind run at once, by kind (default 1 each), e.g. `{ "memory.reflect" = 2 }`. */
      concurrency: Schema.optionalWith(Schema.Record({ key: Schema.String, value: Positive }), {
        default: () => ({})
      }),
      /** A task's lease: a worker that stops heartbeating loses it after this long and the task is retried. */
      lease_seconds: Schema.optionalWith(Positive, { default: () => 30 })
    }),
    { default: () => ({ concurrency: {}, lease_seconds: 30 }) }
  )
}

/** The configuration file's shape (snake_case keys, as written in TOML). @since 0.1.0 @category Schema */
export const ConfigFile = Schema.Struct({
  data_dir: Schema.optionalWith(Schema.String, { default: () => ".palyra" }),
  workspace: Schema.optionalWith(Schema.String, { default: () => "workspace" }),
  model: Schema.optionalWith(Schema.Union(Schema.String, Schema.Array(Schema.String)), {
    default: () => "demo:scripted"
  }),
  instructions: Schema.optional(Schema.String),
  policies_dir: Schema.optional(Schema.String),
  /** A folder of WebAssembly plugin tools (`@palyra/plugins`): one sub-folder per plugin. */
  plugins_dir: Schema.optional(Schema.String),
  server: Schema.optionalWith(
    Schema.Struct({
      host: Schema.optionalWith(Schema.String, { default: () => "127.0.0.1" }),
      http_port: Schema.optionalWith(Port, { default: () => 7420 }),
      grpc_port: Schema.optionalWith(Port, { default: () => 7421 }),
      max_body_bytes: Schema.optionalWith(Positive, { default: () => 1024 * 1024 })
    }),
    { default: () => ({ host: "127.0.0.1", http_port: 7420, grpc_port: 7421, max_body_bytes: 1024 * 1024 }) }
  ),
  auth: Schema.optionalWith(
    Schema.Struct({
      admin_token: Schema.optional(
        Schema.String.pipe(Schema.minLength(16, { message: () => "must be at least 16 characters" }))
      ),
      tokens: Schema.optionalWith(Schema.Array(TokenEntry), { default: () => [] })
    }),
    { default: () => ({ tokens: [] }) }
  ),
  approvals: Schema.optionalWith(
    Schema.Struct({ timeout_seconds: Schema.optionalWith(Positive, { default: () => 600 }) }),
    { default: () => ({ timeout_seconds: 600 }) }
  ),
  budgets: Schema.optionalWith(BudgetsSection, { default: () => ({}) }),
  /** Agents sessions can be bound to (`[[agents]]`), and which agent a channel conversation gets. */
  agents: Schema.optionalWith(Schema.Array(AgentEntry), { default: () => [] }),
  bindings: Schema.optionalWith(Schema.Array(BindingEntry), { default: () => [] }),
  http_fetch: Schema.optionalWith(
    Schema.Struct({
      allow_hosts: Schema.optionalWith(Schema.Array(Schema.String), { default: () => [] }),
      allow_private_networks: Schema.optionalWith(Schema.Boolean, { default: () => false })
    }),
    { default: () => ({ allow_hosts: [], allow_private_networks: false }) }
  ),
  shell: Schema.optionalWith(
    Schema.Struct({
      timeout_seconds: Schema.optionalWith(Positive, { default: () => 30 }),
      /** Sandbox tier for every process a tool starts: none | limits | os (bubblewrap; fails closed). */
      sandbox: Schema.optionalWith(Schema.Literal("none", "limits", "os"), { default: () => "none" as const }),
      /** Executables `limits`/`os` allow (absolute paths or names on PATH); default: everyday utilities. */
      allow_executables: Schema.optional(Schema.Array(Schema.String)),
      /** Interpreters (sh, python, node, …) those tiers allow; default none. */
      allow_interpreters: Schema.optional(Schema.Array(Schema.String)),
      /** Whether sandboxed processes may use the network (`os` tier). */
      network: Schema.optionalWith(Schema.Literal("deny", "allow"), { default: () => "deny" as const }),
      /** The workspace as sandboxed processes see it. */
      workspace_access: Schema.optionalWith(Schema.Literal("rw", "ro"), { default: () => "rw" as const }),
      cpu_seconds: Schema.optional(Positive),
      memory_mb: Schema.optional(Positive),
      file_mb: Schema.optional(Positive),
      processes: Schema.optional(Positive)
    }),
    {
      default: () => ({
        timeout_seconds: 30,
        sandbox: "none" as const,
        network: "deny" as const,
        workspace_access: "rw" as const
      })
    }
  ),
  log: Schema.optionalWith(
    Schema.Struct({
      format: Schema.optionalWith(Schema.Literal("auto", "json", "pretty"), { default: () => "auto" as const }),
      level: Schema.optionalWith(Schema.Literal("debug", "info", "warning", "error"), {
        default: () => "info" as const
      })
    }),
    { default: () => ({ format: "auto" as const, level: "info" as const }) }
  ),
  /** Chat platforms in front of the Gateway (`[[channels]]`: telegram, slack, webhook). */
  channels: Schema.optionalWith(ChannelConfig.Entries, { default: () => [] }),
  /** The context engine: token counting against the model's window, compaction with checkpoints. */
  context: Schema.optionalWith(
    Schema.Struct({
      enabled: Schema.optionalWith(Schema.Boolean, { default: () => true }),
      /** Compact on its own when the prompt passes the threshold (else only `palyra sessions compact`). */
      auto_compact: Schema.optionalWith(Schema.Boolean, { default: () => true }),
      /** Override the model's context window (tokens). */
      context_window: Schema.optional(Positive),
      /** Turns kept verbatim after a compaction. */
      keep_turns: Schema.optional(Positive),
      /** Resolve `@file:` `@folder:` `@url:` `@run:` `@session:` in user messages. */
      references: Schema.optionalWith(Schema.Boolean, { default: () => true }),
      /** Token limits of references: per kind (file, folder, url, run, session) and `total`. */
      reference_limits: Schema.optional(
        Schema.Struct({
          file: Schema.optional(Positive),
          folder: Schema.optional(Positive),
          url: Schema.optional(Positive),
          run: Schema.optional(Positive),
          session: Schema.optional(Positive),
          total: Schema.optional(Positive)
        })
      ),
      /** A workspace file whose managed block receives the facts compactions extract (off when absent). */
      facts_file: Schema.optional(Schema.String),
      /** Whether the model accepts images (default: known per model family). */
      images: Schema.optional(Schema.Boolean)
    }),
    { default: () => ({ enabled: true, auto_compact: true, references: true }) }
  ),
  telemetry: Schema.optionalWith(TelemetrySection, {
    default: () => ({ service_name: "palyrad", headers: {}, sample_ratio: 1 })
  }),
  shutdown_timeout_seconds: Schema.optionalWith(Positive, { default: () => 10 }),
  anchor: Schema.optionalWith(
    Schema.Struct({
      key_file: Schema.optional(Schema.String),
      witness_file: Schema.optional(Schema.String),
      every_seconds: Schema.optionalWith(Positive, { default: () => 60 })
    }),
    { default: () => ({ every_seconds: 60 }) }
  ),
  /** `[console]`: the web console at `/` on the HTTP port (sign in with a token). */
  console: Schema.optionalWith(
    Schema.Struct({
      enabled: Schema.optionalWith(Schema.Boolean, { default: () => true }),
      /** A signed-in browser is signed out after this long without a request. */
      session_idle_seconds: Schema.optionalWith(Positive, { default: () => 1800 }),
      /** … and this long after signing in, however busy. */
      session_max_seconds: Schema.optionalWith(Positive, { default: () => 43_200 }),
      /** Mark the session cookie `Secure` even on plain HTTP (behind a TLS proxy that does not send `X-Forwarded-Proto`). */
      secure_cookies: Schema.optionalWith(Schema.Boolean, { default: () => false })
    }),
    {
      default: () => ({
        enabled: true,
        session_idle_seconds: 1800,
        session_max_seconds: 43_200,
        secure_cookies: false
      })
    }
  ),
  ...AfterRunSections
})
/** @since 0.1.0 @category Schema */
export type ConfigFile = typeof ConfigFile.Type

/** The resolved configuration: paths made absolute. @since 0.1.0 @category Models */
export interface Config extends ConfigFile {
  /** The file that was read, if any. */
  readonly file: string | undefined
  readonly dataDir: string
  readonly workspaceDir: string
  readonly policiesDir: string | undefined
  readonly pluginsDir: string | undefined
  readonly models: ReadonlyArray<string>
  /** The journal anchor's signing key (default `<data_dir>/anchor.key`). */
  readonly anchorKeyFile: string
  /** The journal anchor's witness file (default `<data_dir>/journal.anchor`). */
  readonly anchorWitnessFile: string
}

/** Start-up refused: the message names the key. @since 0.1.0 @category Errors */
export class ConfigError extends Data.TaggedError("ConfigError")<{ readonly message: string }> {}

/** Flags recognised by palyrad. @since 0.1.0 @category Models */
export interface Flags {
  readonly config?: string | undefined
  readonly dataDir?: string | undefined
  readonly workspace?: string | undefined
  readonly model?: string | undefined
  readonly host?: string | undefined
  readonly port?: string | undefined
  readonly logFormat?: string | undefined
}

/** Parse `--flag value` / `--flag=value` arguments. @since 0.1.0 @category Parsing */
export const parseFlags = (argv: ReadonlyArray<string>): Either.Either<Flags, ConfigError> => {
  const known: Record<string, keyof Flags> = {
    "--config": "config",
    "--data-dir": "dataDir",
    "--workspace": "workspace",
    "--model": "model",
    "--host": "host",
    "--port": "port",
    "--log-format": "logFormat"
  }
  const out: Record<string, string> = {}
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!
    const [name, inline] = arg.includes("=")
      ? [arg.slice(0, arg.indexOf("=")), arg.slice(arg.indexOf("=") + 1)]
      : [arg, undefined]
    const key = known[name]
    if (key === undefined)
      return Either.left(new ConfigError({ message: `unknown flag ${name} (known: ${Object.keys(known).join(", ")})` }))
    const value = inline ?? argv[++i]
    if (value === undefined) return Either.left(new ConfigError({ message: `flag ${name} needs a value` }))
    out[key] = value
  }
  return Either.right(out as Flags)
}

const setPath = (target: Record<string, unknown>, path: ReadonlyArray<string>, value: unknown) => {
  let node = target
  for (const key of path.slice(0, -1)) {
    const next = node[key]
    node[key] = typeof next === "object" && next !== null && !Array.isArray(next) ? { ...(next as object) } : {}
    node = node[key] as Record<string, unknown>
  }
  node[path.at(-1)!] = value
}

const asNumber = (value: string) => (/^-?\d+$/.test(value.trim()) ? Number(value) : value)

/**
 * Load and validate the configuration.
 *
 * @since 0.1.0
 * @category Loading
 */
export const load = (
  flags: Flags,
  env: Record<string, string | undefined> = process.env,
  cwd: string = process.cwd()
): Effect.Effect<Config, ConfigError> =>
  Effect.gen(function* () {
    const home = env.PALYRA_HOME ? resolve(cwd, env.PALYRA_HOME) : undefined
    const explicit = flags.config ?? env.PALYRA_CONFIG
    const candidates = explicit
      ? [resolve(cwd, explicit)]
      : [join(cwd, "palyra.toml"), ...(home ? [join(home, "palyra.toml")] : [])]
    const file = candidates.find((c) => existsSync(c))
    if (explicit && file === undefined)
      return yield* new ConfigError({ message: `config file ${candidates[0]} does not exist` })
    let raw: Record<string, unknown> = {}
    if (file) {
      raw = yield* Effect.try({
        try: () => parseToml(readFileSync(file, "utf8")) as Record<string, unknown>,
        catch: (e) =>
          new ConfigError({
            message: `${file}: not valid TOML: ${e instanceof Error ? e.message.split("\n")[0] : String(e)}`
          })
      })
    }
    // Environment, then flags, on top of the file.
    const overrides: Array<[ReadonlyArray<string>, string | undefined, boolean]> = [
      [["data_dir"], env.PALYRA_DATA_DIR ?? (home && !raw.data_dir ? join(home, "data") : undefined), false],
      [["workspace"], env.PALYRA_WORKSPACE, false],
      [["model"], env.PALYRA_MODEL, false],
      [["policies_dir"], env.PALYRA_POLICIES_DIR, false],
      [["plugins_dir"], env.PALYRA_PLUGINS_DIR, false],
      [["instructions"], env.PALYRA_INSTRUCTIONS, false],
      [["server", "host"], env.PALYRA_HOST, false],
      [["server", "http_port"], env.PALYRA_HTTP_PORT, true],
      [["server", "grpc_port"], env.PALYRA_GRPC_PORT, true],
      [["auth", "admin_token"], env.PALYRA_ADMIN_TOKEN, false],
      [["log", "format"], env.PALYRA_LOG_FORMAT, false],
      [["log", "level"], env.PALYRA_LOG_LEVEL, false],
      [["telemetry", "otlp_endpoint"], env.PALYRA_OTLP_ENDPOINT, false],
      [["data_dir"], flags.dataDir, false],
      [["workspace"], flags.workspace, false],
      [["model"], flags.model, false],
      [["server", "host"], flags.host, false],
      [["server", "http_port"], flags.port, true],
      [["log", "format"], flags.logFormat, false]
    ]
    for (const [path, value, numeric] of overrides) {
      if (value !== undefined && value !== "") setPath(raw, path, numeric ? asNumber(value) : value)
    }
    const decoded = Schema.decodeUnknownEither(ConfigFile, { errors: "all", onExcessProperty: "error" })(raw)
    if (Either.isLeft(decoded)) {
      const issues = ParseResult.ArrayFormatter.formatErrorSync(decoded.left)
      const first = issues[0]!
      const key = first.path.join(".") || "(root)"
      const where = file ? ` in ${file}` : ""
      const message =
        first._tag === "Unexpected" ? `${key}: unknown setting${where}` : `${key}: ${first.message}${where}`
      return yield* new ConfigError({
        message: issues.length > 1 ? `${message} (and ${issues.length - 1} more)` : message
      })
    }
    const cfg = decoded.right
    const base = file ? dirname(file) : cwd
    const abs = (p: string) => (isAbsolute(p) ? p : resolve(base, p))
    const models = (typeof cfg.model === "string" ? cfg.model.split(",") : cfg.model)
      .map((m) => m.trim())
      .filter(Boolean)
    if (models.length === 0) return yield* new ConfigError({ message: "model: must name at least one model" })
    const ids = new Set<string>()
    for (const [i, a] of cfg.agents.entries()) {
      if (ids.has(a.id)) return yield* new ConfigError({ message: `agents.${i}.id: agent ${a.id} is configured twice` })
      ids.add(a.id)
    }
    ids.add("default")
    const unbound = cfg.bindings.findIndex((b) => !ids.has(b.agent))
    if (unbound >= 0) {
      return yield* new ConfigError({
        message: `bindings.${unbound}.agent: no agent ${cfg.bindings[unbound]!.agent} (configure it under [[agents]])`
      })
    }
    const dataDir = abs(cfg.data_dir)
    return {
      ...cfg,
      file,
      dataDir,
      anchorKeyFile: cfg.anchor.key_file === undefined ? join(dataDir, "anchor.key") : abs(cfg.anchor.key_file),
      anchorWitnessFile:
        cfg.anchor.witness_file === undefined ? join(dataDir, "journal.anchor") : abs(cfg.anchor.witness_file),
      workspaceDir: abs(cfg.workspace),
      policiesDir: cfg.policies_dir === undefined ? undefined : abs(cfg.policies_dir),
      pluginsDir: cfg.plugins_dir === undefined ? undefined : abs(cfg.plugins_dir),
      models
    }
  })
