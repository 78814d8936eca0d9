/**
 * `palyra doctor`: check a local installation the way palyrad will meet it, and say what to do about
 * each problem. Checks, in order:
 *
 * - **config**: palyrad's own `Config.load` (its message names the bad key);
 * - **ports**: the HTTP and gRPC ports are free, or held by palyrad itself (it answers its health
 *   check there);
 * - **data dir**: mode 0700, the admin token file and the anchor key 0600;
 * - **journal**: chains and stored records (and the signed anchors, when there is a key), read-only,
 *   with a progress bar on a large journal;
 * - **model**: `openai-compatible:` answers `GET /models` (and serves the model); `openai:` /
 *   `anthropic:` have their key variable set; `demo:` needs nothing;
 * - **policies**: the Cedar files parse and validate against Palyra's schema;
 * - **sandbox**: which tiers work here, and whether the configured one does;
 * - **after-run**: the watchdog's mode, memory items, learning candidates waiting for review and the
 *   watchdog's open incidents (read-only from the journal; open incidents are a warning).
 *
 * Exit code 1 when any check fails (warnings do not count).
 *
 * @since 0.1.0
 */
import { existsSync, statSync } from "node:fs"
import { connect as http2Connect } from "node:http2"
import { createServer } from "node:net"
import { join } from "node:path"
import * as Command from "@effect/cli/Command"
import * as CliOptions from "@effect/cli/Options"
import * as HttpApiClient from "@effect/platform/HttpApiClient"
import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import * as HttpClientResponse from "@effect/platform/HttpClientResponse"
import { CedarPolicy } from "@palyra/core/cedar"
import { Watchdog } from "@palyra/core/memory"
import { Models } from "@palyra/core/models"
import { Sandbox } from "@palyra/core/tools"
import { SqliteJournal, SqliteMemoryStore } from "@palyra/journal"
import { Api } from "@palyra/transport-http"
import { Cause, Duration, Effect, Either, Option, Schema } from "effect"
import * as Config from "./Config.js"
import { CliEnv, CliIo, Failed, json, out } from "./internal/cli/io.js"
import * as Progress from "./internal/cli/progress.js"
import * as VerifyOffline from "./VerifyOffline.js"

/** How a check came out. @since 0.1.0 @category Models */
export type Status = "ok" | "warn" | "fail"

/** One check: what was found and, for a problem, what to do. @since 0.1.0 @category Models */
export interface Check {
  readonly name: string
  readonly status: Status
  readonly detail: string
  readonly fix?: string | undefined
}

/** @since 0.1.0 @category Models */
export interface Options {
  /** Where palyrad would read its configuration from. */
  readonly flags: Config.Flags
  readonly env: Record<string, string | undefined>
  readonly cwd: string
  /** Hears the journal check's progress (rows of one chain checked, of the total). */
  readonly onProgress?: ((progress: VerifyOffline.Progress) => Effect.Effect<void>) | undefined
  /** Helper paths for the sandbox probe (tests point them elsewhere). */
  readonly sandbox?: Pick<Sandbox.Options, "bwrapPath" | "prlimitPath"> | undefined
  /** How long a network probe may take (default 5 seconds). */
  readonly timeout?: Duration.DurationInput | undefined
}

const ok = (name: string, detail: string): Check => ({ name, status: "ok", detail })
const warn = (name: string, detail: string, fix?: string): Check => ({ name, status: "warn", detail, fix })
const fail = (name: string, detail: string, fix?: string): Check => ({ name, status: "fail", detail, fix })

const message = (e: unknown) => (e instanceof Error ? e.message : String(e))

// =============================================================================
// ports
// =============================================================================

/** Can we listen there? `EADDRINUSE` and friends come back as the error code. */
const listenable = (host: string, port: number) =>
  Effect.async<Option.Option<string>>((resume) => {
    const server = createServer()
    server.once("error", (e: NodeJS.ErrnoException) => resume(Effect.succeed(Option.some(e.code ?? e.message))))
    server.listen({ host, port, exclusive: true }, () => server.close(() => resume(Effect.succeed(Option.none()))))
  })

/** The address to reach a server listening on `host` from this machine. */
const reachable = (host: string) =>
  host === "0.0.0.0" || host === "" ? "127.0.0.1" : host === "::" ? "[::1]" : host.includes(":") ? `[${host}]` : host

/** palyrad's HTTP health route answers there, as the contract says. */
const isPalyraHttp = (host: string, port: number, timeout: Duration.DurationInput) =>
  HttpApiClient.make(Api.Api, { baseUrl: `http://${reachable(host)}:${port}` }).pipe(
    Effect.flatMap((client) => client.health.healthz()),
    Effect.timeout(timeout),
    Effect.as(true),
    Effect.orElseSucceed(() => false)
  )

/** A gRPC health check over HTTP/2 (the Connect protocol's JSON form, which palyrad's port also serves). */
const isPalyraGrpc = (host: string, port: number, timeout: Duration.DurationInput) =>
  Effect.async<boolean>((resume) => {
    const session = http2Connect(`http://${reachable(host)}:${port}`)
    const finish = (answer: boolean) => {
      session.close()
      resume(Effect.succeed(answer))
    }
    session.on("error", () => finish(false))
    const request = session.request({
      ":method": "POST",
      ":path": "/grpc.health.v1.Health/Check",
      "content-type": "application/json",
      "connect-protocol-version": "1"
    })
    let body = ""
    let status = 0
    request.setEncoding("utf8")
    request.on("response", (headers) => (status = Number(headers[":status"])))
    request.on("data", (chunk: string) => (body += chunk))
    request.on("end", () => finish(status === 200 && /"status"\s*:\s*"SERVING"/.test(body)))
    request.on("error", () => finish(false))
    request.end("{}")
    return Effect.sync(() => session.destroy())
  }).pipe(
    Effect.timeout(timeout),
    Effect.orElseSucceed(() => false)
  )

const portCheck = (
  name: string,
  setting: string,
  host: string,
  port: number,
  ours: Effect.Effect<boolean, never, HttpClient.HttpClient>
) =>
  Effect.gen(function* () {
    if (port === 0) return ok(name, `${setting} = 0: palyrad picks a free port at start-up`)
    const error = yield* listenable(host, port)
    if (Option.isNone(error)) return ok(name, `${host}:${port} is free`)
    if (error.value !== "EADDRINUSE")
      return fail(
        name,
        `cannot listen on ${host}:${port} (${error.value})`,
        `choose another ${setting} (ports below 1024 need privileges) or another server.host`
      )
    return (yield* ours)
      ? ok(name, `${host}:${port} is in use by palyrad (it answers its health check)`)
      : fail(
          name,
          `${host}:${port} is in use by another program`,
          `stop that program, or set ${setting} in the config (or PALYRA_${setting === "server.http_port" ? "HTTP" : "GRPC"}_PORT)`
        )
  })

// =============================================================================
// data dir
// =============================================================================

const mode = (file: string) => statSync(file).mode & 0o777

const dataDirCheck = (config: Config.Config): Check => {
  const name = "data dir"
  const dir = config.dataDir
  if (!existsSync(dir)) return ok(name, `${dir} does not exist yet; palyrad creates it (mode 0700) on first start`)
  if (!statSync(dir).isDirectory()) return fail(name, `${dir} is not a directory`, `move it aside, or set data_dir`)
  const problems: Array<[string, string]> = []
  const dirMode = mode(dir)
  if ((dirMode & 0o077) !== 0) problems.push([`${dir} is mode 0${dirMode.toString(8)}`, `chmod 700 ${dir}`])
  for (const file of [join(dir, "admin.token"), config.anchorKeyFile]) {
    if (!existsSync(file)) continue
    const m = mode(file)
    if ((m & 0o077) !== 0) problems.push([`${file} is mode 0${m.toString(8)}`, `chmod 600 ${file}`])
  }
  if (problems.length > 0)
    return fail(
      name,
      `others can read palyrad's secrets: ${problems.map(([p]) => p).join("; ")}`,
      problems.map(([, f]) => f).join(" && ")
    )
  return ok(name, `${dir} is mode 0700; the token and key files are 0600`)
}

// =============================================================================
// journal
// =============================================================================

const journalCheck = (
  config: Config.Config,
  onProgress: (progress: VerifyOffline.Progress) => Effect.Effect<void>
): Effect.Effect<Check> =>
  Effect.gen(function* () {
    const name = "journal"
    const db = join(config.dataDir, "journal.db")
    if (!existsSync(db)) return ok(name, `no journal yet (${db} is created on first start)`)
    const fixBroken =
      "the journal was changed outside palyrad: keep a copy for investigation (`palyra journal verify --anchor …` names the first bad row), then restore from a backup"
    if (!existsSync(config.anchorKeyFile)) {
      const chains = yield* Effect.either(VerifyOffline.verifyChains(db, onProgress))
      if (Either.isLeft(chains))
        return fail(
          name,
          `cannot read ${db}: ${chains.left.message}`,
          "check the file's permissions and that it is a palyrad journal"
        )
      return chains.right.ok
        ? warn(
            name,
            `${db}: chains intact (${chains.right.checked} tape rows); no anchor key yet, so no signed anchors to check`
          )
        : fail(name, `${db}: BROKEN (${chains.right.reason}): ${chains.right.detail}`, fixBroken)
    }
    const request = { db, witnessFile: config.anchorWitnessFile, keyFile: config.anchorKeyFile }
    const report = yield* Effect.either(VerifyOffline.verify(request, onProgress))
    if (Either.isLeft(report))
      return fail(
        name,
        `cannot verify ${db}: ${report.left.message}`,
        "check the files' permissions (and that the key is an Ed25519 key)"
      )
    const { journal, anchor } = report.right
    if (!journal.ok) return fail(name, `${db}: BROKEN (${journal.reason}): ${journal.detail}`, fixBroken)
    if (!anchor.ok)
      return fail(
        name,
        `${db}: chains intact (${journal.checked} tape rows) but the anchors FAILED (${anchor.reason}): ${anchor.detail}`,
        fixBroken
      )
    return ok(
      name,
      `${db}: chains intact (${journal.checked} tape rows); ${anchor.anchors} signed anchor${anchor.anchors === 1 ? "" : "s"} verified`
    )
  })

// =============================================================================
// model
// =============================================================================

const ModelList = Schema.Struct({ data: Schema.Array(Schema.Struct({ id: Schema.String })) })

const modelCheck = (
  spec: string,
  env: Record<string, string | undefined>,
  timeout: Duration.DurationInput
): Effect.Effect<Check, never, HttpClient.HttpClient> =>
  Effect.gen(function* () {
    const name = `model ${spec}`
    const parsed = yield* Effect.either(Models.parse(spec))
    if (Either.isLeft(parsed)) return fail(name, parsed.left.message, "fix `model` in the config (see `palyra init`)")
    const m = parsed.right
    switch (m.provider) {
      case "demo":
        return m.model === "scripted"
          ? ok(name, "the offline demo: no key, no network")
          : fail(name, `unknown demo model "${m.model}"`, 'use "demo:scripted"')
      case "openai":
      case "anthropic": {
        const variable = m.provider === "openai" ? "OPENAI_API_KEY" : "ANTHROPIC_API_KEY"
        if (!env[variable]) return fail(name, `${variable} is not set`, `export ${variable}=… before starting palyrad`)
        if (m.provider === "anthropic" && !resolvable("@ai-sdk/anthropic"))
          return fail(
            name,
            "the package @ai-sdk/anthropic is not installed",
            "npm install @ai-sdk/anthropic next to palyrad"
          )
        return ok(name, `${variable} is set`)
      }
      case "openai-compatible": {
        const url = `${m.baseURL.replace(/\/+$/, "")}/models`
        const key = env.OPENAI_COMPATIBLE_API_KEY
        const client = yield* HttpClient.HttpClient
        const answer: Either.Either<ReadonlyArray<string> | undefined, string> = yield* client
          .execute(
            key ? HttpClientRequest.get(url).pipe(HttpClientRequest.bearerToken(key)) : HttpClientRequest.get(url)
          )
          .pipe(
            Effect.flatMap((response) =>
              response.status >= 200 && response.status < 300
                ? HttpClientResponse.schemaBodyJson(ModelList)(response).pipe(
                    Effect.map(
                      (list): Either.Either<ReadonlyArray<string> | undefined, string> =>
                        Either.right(list.data.map((d) => d.id))
                    ),
                    Effect.orElseSucceed(() => Either.right(undefined))
                  )
                : Effect.succeed(Either.left(`GET ${url} answered ${response.status}`))
            ),
            Effect.timeout(timeout),
            Effect.catchAll((e) => Effect.succeed(Either.left(`cannot reach ${url}: ${message(e)}`)))
          )
        if (Either.isLeft(answer))
          return fail(
            name,
            answer.left,
            "start the model server, or fix the base URL in `model` (and OPENAI_COMPATIBLE_API_KEY if it needs one)"
          )
        const served = answer.right
        if (served === undefined) return ok(name, `GET ${url} answered`)
        return served.includes(m.model)
          ? ok(name, `${url} serves ${m.model}`)
          : warn(
              name,
              `${url} answers but does not list ${m.model} (it lists ${served.slice(0, 8).join(", ") || "nothing"})`,
              `pull or load ${m.model} on that server, or name one it serves`
            )
      }
    }
  })

const resolvable = (specifier: string) => {
  try {
    import.meta.resolve(specifier)
    return true
  } catch {
    return false
  }
}

// =============================================================================
// policies, sandbox
// =============================================================================

const policyCheck = (config: Config.Config): Effect.Effect<Check> =>
  Effect.gen(function* () {
    const name = "policies"
    const dir = config.policiesDir
    if (dir === undefined) {
      // palyrad installs the built-ins on its first tool call: load Cedar here, so a broken install
      // shows now rather than as failed runs.
      const loads = yield* Effect.exit(Effect.flatMap(CedarPolicy.make({ cacheSize: 0 }), (engine) => engine.version))
      if (loads._tag === "Success") return ok(name, "the built-in default policies (no policies_dir); Cedar loads them")
      const why = Cause.squash(loads.cause)
      return fail(
        name,
        `Cedar cannot load the built-in policies: ${why instanceof Error ? why.message : String(why)}`,
        "reinstall palyrad (its @cedar-policy/cedar-wasm dependency is missing or damaged)"
      )
    }
    if (!existsSync(dir))
      return fail(name, `policies_dir ${dir} does not exist`, `create it with *.cedar files, or remove policies_dir`)
    const text = yield* Effect.either(CedarPolicy.readPolicyDirectory(dir))
    if (Either.isLeft(text)) return fail(name, text.left.message, `check ${dir}'s permissions`)
    if (text.right.trim().length === 0)
      return warn(
        name,
        `${dir} holds no *.cedar policies: every tool call will be denied`,
        "add policies (the defaults are in `CedarPolicy.defaultPolicies`)"
      )
    const engine = yield* Effect.either(CedarPolicy.make({ policies: text.right, cacheSize: 0 }))
    return Either.isLeft(engine)
      ? fail(name, `${dir}: ${engine.left.message}`, "fix the policies Cedar names; palyrad refuses to start with them")
      : ok(name, `${dir}: the policies parse and validate against Palyra's Cedar schema`)
  })

const sandboxCheck = (config: Config.Config, helpers: Options["sandbox"]): Effect.Effect<Check> =>
  Effect.gen(function* () {
    const sh = config.shell
    const report = yield* Sandbox.probe({
      ...helpers,
      ...(sh.allow_executables ? { allowExecutables: sh.allow_executables } : {}),
      network: sh.network,
      workspace: sh.workspace_access
    })
    const tiers = (["none", "limits", "os"] as const)
      .map((t) => `${t}: ${report[t].available ? "works" : "unavailable"} (${report[t].detail})`)
      .join("; ")
    const chosen = report[sh.sandbox]
    return chosen.available
      ? ok("sandbox", `shell.sandbox = "${sh.sandbox}" works here. ${tiers}`)
      : fail(
          "sandbox",
          `shell.sandbox = "${sh.sandbox}" does not work here: ${chosen.detail}. ${tiers}`,
          sh.sandbox === "os"
            ? 'install bubblewrap (bwrap) and allow unprivileged user namespaces, or set shell.sandbox = "limits"'
            : 'install util-linux (prlimit), or set shell.sandbox = "none"'
        )
  })

// =============================================================================
// All checks
// =============================================================================

/**
 * Run every check. When the configuration does not load, that is the only check (the others need it).
 *
 * @since 0.1.0
 * @category Checks
 */
export const run = (options: Options): Effect.Effect<ReadonlyArray<Check>, never, HttpClient.HttpClient> =>
  Effect.gen(function* () {
    const loaded = yield* Effect.either(Config.load(options.flags, options.env, options.cwd))
    if (Either.isLeft(loaded))
      return [
        fail(
          "config",
          loaded.left.message,
          "fix that setting (palyrad refuses to start until then); `palyra init --force` writes a fresh file"
        )
      ]
    const config = loaded.right
    const timeout = options.timeout ?? Duration.seconds(5)
    const { host, http_port, grpc_port } = config.server
    const checks: Array<Check> = [
      ok(
        "config",
        config.file ? `${config.file} loads` : "no config file: palyrad's defaults (`palyra init` writes one)"
      )
    ]
    checks.push(
      yield* portCheck("http port", "server.http_port", host, http_port, isPalyraHttp(host, http_port, timeout))
    )
    checks.push(
      yield* portCheck("grpc port", "server.grpc_port", host, grpc_port, isPalyraGrpc(host, grpc_port, timeout))
    )
    checks.push(dataDirCheck(config))
    checks.push(yield* journalCheck(config, options.onProgress ?? (() => Effect.void)))
    for (const spec of config.models) checks.push(yield* modelCheck(spec, options.env, timeout))
    checks.push(yield* policyCheck(config))
    checks.push(yield* sandboxCheck(config, options.sandbox))
    checks.push(yield* afterRunCheck(config))
    return checks
  })

// =============================================================================
// after-run: memory, learning, watchdog
// =============================================================================

const plural = (n: number, one: string, many = `${one}s`) => `${n.toLocaleString("en-US")} ${n === 1 ? one : many}`

const afterRunCheck = (config: Config.Config): Effect.Effect<Check> =>
  Effect.gen(function* () {
    const name = "after-run"
    const { memory, learning, watchdog } = config
    const mode = `watchdog: ${watchdog.mode}`
    const db = join(config.dataDir, "journal.db")
    if (!existsSync(db)) return ok(name, `${mode}; no journal yet, so no memory, candidates or incidents`)
    const read = Effect.all({
      counts: SqliteMemoryStore.counts(db),
      incidents: Effect.scoped(
        Effect.flatMap(SqliteJournal.make({ filename: db, readonly: true }), (journal) =>
          Watchdog.readIncidents(journal)
        )
      )
    })
    const found = yield* Effect.either(read)
    if (Either.isLeft(found))
      return fail(name, `${mode}; cannot read ${db}: ${found.left.message}`, "check the file's permissions")
    const { counts, incidents } = found.right
    const open = incidents.filter((i) => i.state === "open")
    const detail = [
      mode,
      `memory: ${memory.enabled ? "" : "off, "}${plural(counts.items, "item")}`,
      `learning: ${learning.enabled ? "" : "off, "}${plural(counts.pendingCandidates, "candidate")} pending review`,
      `incidents: ${open.length} open${open.length === 0 ? "" : ` (${[...new Set(open.map((i) => i.kind))].join(", ")})`}`
    ].join("; ")
    if (open.length > 0)
      return warn(
        name,
        detail,
        "`palyra incidents --open` lists them (palyrad resolves them when the condition clears)"
      )
    return ok(name, detail)
  })

const mark: Record<Status, string> = { ok: "✔", warn: "!", fail: "✖" }

/**
 * The checks as the CLI prints them.
 *
 * @since 0.1.0
 * @category Formatting
 */
export const format = (checks: ReadonlyArray<Check>): string => {
  const width = Math.max(...checks.map((c) => c.name.length))
  const lines = checks.flatMap((c) => [
    `${mark[c.status]} ${c.name.padEnd(width)}  ${c.detail}`,
    ...(c.fix === undefined ? [] : [`  ${" ".repeat(width)}  → ${c.fix}`])
  ])
  const failed = checks.filter((c) => c.status === "fail").length
  const warned = checks.filter((c) => c.status === "warn").length
  lines.push(
    failed === 0
      ? `all good${warned > 0 ? ` (${warned} warning${warned === 1 ? "" : "s"})` : ""}`
      : `${failed} problem${failed === 1 ? "" : "s"} to fix`
  )
  return `${lines.join("\n")}\n`
}

/** Journals up to this many rows verify without a progress bar. */
const QUIET_ROWS = 2000

/**
 * `palyra doctor`.
 *
 * @since 0.1.0
 * @category Commands
 */
export const command = Command.make(
  "doctor",
  {
    json: CliOptions.boolean("json").pipe(CliOptions.withDescription("print { ok, checks } as one JSON document")),
    config: CliOptions.text("config").pipe(CliOptions.withDescription("palyrad's config file"), CliOptions.optional),
    dataDir: CliOptions.text("data-dir").pipe(CliOptions.withDescription("palyrad's data dir"), CliOptions.optional)
  },
  (o) =>
    Effect.gen(function* () {
      const { env, cwd } = yield* CliEnv
      const io = yield* CliIo
      const bars = {
        tape: Progress.make(io, "journal: tape rows   "),
        records: Progress.make(io, "journal: record rows ")
      }
      const checks = yield* run({
        flags: { config: Option.getOrUndefined(o.config), dataDir: Option.getOrUndefined(o.dataDir) },
        env,
        cwd,
        onProgress: ({ chain, checked, total }) =>
          total <= QUIET_ROWS
            ? Effect.void
            : Effect.zipRight(bars[chain].update(checked, total), checked >= total ? bars[chain].done : Effect.void)
      })
      const healthy = checks.every((c) => c.status !== "fail")
      if (o.json) yield* json({ ok: healthy, checks })
      else yield* out(format(checks))
      if (!healthy) return yield* new Failed({ message: "" })
    })
).pipe(
  Command.withDescription(
    "check the configuration, ports, data dir, journal, model, policies, sandbox, memory and watchdog"
  )
)
