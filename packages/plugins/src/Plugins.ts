/**
 * WebAssembly plugin tools. A plugin is a folder with a WebAssembly module and a manifest
 * (`plugin.json` or `plugin.toml`, see `Manifest`); each becomes one `Tool`, so policy (Cedar),
 * approvals, budgets and the tape apply to it unchanged.
 *
 * - **Identity.** A plugin is its module's SHA-256 digest. The tool's name carries the first 16 hex
 *   digits (`plugin.word-count@3f2a9c1b4d5e6f70`), so every grant (`session` grants bind the tool
 *   name, `always` grants the digest of name and arguments) and every policy naming the tool binds
 *   that exact module: a changed file is a new tool that needs approving again. The full digest is
 *   in every result on the tape (`{ plugin: { name, digest }, output, hostCalls }`).
 * - **Runtime.** Extism's JS SDK runs the module in a worker thread of its own, **a fresh instance for
 *   every call** (nothing a call leaves in memory reaches the next call, session or principal), with
 *   no WASI, no preopened paths, no allowed hosts (Extism's own HTTP is off, its `fetch` refuses), an
 *   empty environment and only Palyra's host functions.
 * - **Limits.** Linear memory: the module's memory section is rewritten to declare a maximum
 *   (`limits.memory_pages`, at most the host's ceiling), so growth past it fails inside the module;
 *   Extism's own blocks are capped too. Time: Extism's `timeoutMs` ends the call and its worker,
 *   and an `Effect.timeout` of our own does the same if that did not; interruption (cancel) too.
 * - **Capabilities.** Host functions exist for every plugin but answer only for capabilities its
 *   manifest asked for and the host grants: `palyra_read_file(path)` reads a workspace file through
 *   `confine` (no `..`, absolute path or symlink out of the workspace); `palyra_http_fetch(request
 *   json)` goes through `NetGuard.safeFetch` with the host's allowlist. Each answer is one status
 *   byte (0 ok, 1 refused or failed) and the payload (the result, or `reason: message`).
 *
 * @since 0.1.0
 */
import { createHash } from "node:crypto"
import { readdir, readFile, stat } from "node:fs/promises"
import { basename, join } from "node:path"
import createPlugin, { type CallContext, type ManifestLike, type Plugin } from "@extism/extism"
import { Errors, Tool } from "@palyra/core"
import { BuiltinTools, NetGuard } from "@palyra/core/tools"
import { Duration, Effect, Option, Runtime, Schema } from "effect"
import { limitMemory } from "./internal/memory.js"
import { type WasmModule, wasm } from "./internal/wasm.js"
import * as PluginManifest from "./PluginManifest.js"

// =============================================================================
// Errors
// =============================================================================

/**
 * A plugin that cannot be loaded: its manifest, its module or what it asks for. `file` names the
 * file at fault.
 *
 * @since 0.1.0
 * @category Errors
 */
export class PluginLoadError extends Schema.TaggedError<PluginLoadError>("@palyra/plugins/PluginLoadError")(
  "PluginLoadError",
  { file: Schema.String, detail: Schema.String }
) {
  override get message(): string {
    return `plugin ${this.file}: ${this.detail}`
  }
}

// =============================================================================
// Options
// =============================================================================

/** @since 0.1.0 @category Models */
export interface HttpOptions {
  /** Hosts plugins may fetch (as `NetGuard.safeFetch`'s `allowHosts`). Empty: none. */
  readonly allowHosts: ReadonlyArray<string>
  readonly allowPrivateNetworks?: boolean | undefined
  /** Largest response body handed to a plugin (default 256 KiB). */
  readonly maxBytes?: number | undefined
  /** Time limit of one request (default 10 s; the call's own limit still applies). */
  readonly timeoutMs?: number | undefined
  /** Name resolution (tests); the system resolver by default. */
  readonly resolver?: NetGuard.Resolver | undefined
}

/** @since 0.1.0 @category Models */
export interface Options {
  /** The workspace root: `palyra_read_file` reads nothing outside it. */
  readonly workspace: string
  /** The guarded fetch behind `palyra_http_fetch`. Absent: every request is refused. */
  readonly http?: HttpOptions | undefined
  /**
   * Capabilities the host lets plugins have (default: both). A plugin asking for one not granted
   * does not load.
   */
  readonly grant?: ReadonlyArray<PluginManifest.Capability> | undefined
  /** Ceiling on `limits.memory_pages` and the default (default 256 pages: 16 MiB). */
  readonly maxMemoryPages?: number | undefined
  /** Ceiling on `limits.timeout_ms` (default 60 s); the default is 10 s. */
  readonly maxTimeoutMs?: number | undefined
  /** Largest file `palyra_read_file` returns (default 1 MiB). */
  readonly maxFileBytes?: number | undefined
  /** Largest output a call may return (default 1 MiB). */
  readonly maxOutputBytes?: number | undefined
  /** Host-function calls allowed in one plugin call (default 64). */
  readonly maxHostCalls?: number | undefined
  /** Calls of one plugin running at once, each in its own worker (default 2). */
  readonly concurrency?: number | undefined
}

const defaults = {
  maxMemoryPages: 256,
  maxTimeoutMs: 60_000,
  timeoutMs: 10_000,
  maxFileBytes: 1024 * 1024,
  maxOutputBytes: 1024 * 1024,
  maxHostCalls: 64,
  concurrency: 2,
  httpMaxBytes: 256 * 1024,
  httpTimeoutMs: 10_000
}

const maxManifestBytes = 64 * 1024
const maxModuleBytes = 64 * 1024 * 1024

// =============================================================================
// Loaded plugins
// =============================================================================

/** A host-function call, as it appears in the tool's result. @since 0.1.0 @category Models */
export interface HostCall {
  readonly fn: "read_file" | "http_fetch"
  readonly target: string
  readonly ok: boolean
  readonly detail?: string | undefined
}

/** A loaded plugin: its manifest, identity and the tool it is. @since 0.1.0 @category Models */
export interface LoadedPlugin {
  readonly manifest: PluginManifest.Manifest
  /** Lower-case hex SHA-256 of the module file as it is on disk. */
  readonly digest: string
  readonly moduleFile: string
  readonly memoryPages: number
  readonly timeoutMs: number
  readonly tool: Tool.AnyTool
  /** How many times the module's export has been entered (arguments that fail to validate never are). */
  readonly invocations: () => number
}

/**
 * The tool name of a plugin: `plugin.<name>@<first 16 hex digits of its digest>`.
 *
 * @since 0.1.0
 * @category Utils
 */
export const toolName = (name: string, digest: string): string => `plugin.${name}@${digest.slice(0, 16)}`

const riskOrder = { low: 0, sensitive: 1, critical: 2 } as const
/** A plugin that reaches the network is at least as risky as the built-in `http.fetch`. */
const riskFloor = (manifest: PluginManifest.Manifest): PluginManifest.Manifest["risk"] =>
  manifest.capabilities.includes("http.fetch") && riskOrder[manifest.risk] < riskOrder.sensitive
    ? "sensitive"
    : manifest.risk

const hostModule = "extism:host/user"
const hostFunctions = ["palyra_read_file", "palyra_http_fetch"] as const
/** Extism's own imports; its HTTP is there but answers nothing (no allowed hosts, a refusing fetch). */
const extismModule = "extism:host/env"

const encoder = new TextEncoder()
const ok = (payload: Uint8Array) => {
  const out = new Uint8Array(payload.length + 1)
  out.set(payload, 1)
  return out
}
const fail = (reason: string, message: string) => {
  const text = encoder.encode(`${reason}: ${message}`)
  const out = new Uint8Array(text.length + 1)
  out[0] = 1
  out.set(text, 1)
  return out
}

const FetchRequest = Schema.Struct({
  url: Schema.String.pipe(Schema.maxLength(8192)),
  method: Schema.optional(Schema.Literal("GET", "POST", "HEAD")),
  headers: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.String })),
  body: Schema.optional(Schema.String.pipe(Schema.maxLength(1024 * 1024)))
})
const decodeFetchRequest = Schema.decodeUnknownEither(Schema.parseJson(FetchRequest), { onExcessProperty: "error" })

const refusingFetch: typeof fetch = () => Promise.reject(new TypeError("network access is not available to plugins"))
const quiet: Console = { ...console, log() {}, info() {}, debug() {}, warn() {}, error() {}, trace() {} }

interface Prepared {
  readonly manifestFile: string
  readonly manifest: PluginManifest.Manifest
  readonly digest: string
  readonly moduleFile: string
  readonly module: WasmModule
  readonly memoryPages: number
  readonly timeoutMs: number
}

const readLimited = (file: string, limit: number) =>
  Effect.tryPromise({
    try: async () => {
      const info = await stat(file)
      if (!info.isFile()) throw new Error("is not a file")
      if (info.size > limit) throw new Error(`is ${info.size} bytes, over the limit of ${limit}`)
      return new Uint8Array(await readFile(file))
    },
    catch: (cause) => new PluginLoadError({ file, detail: cause instanceof Error ? cause.message : String(cause) })
  })

const manifestFile = (dir: string) =>
  Effect.gen(function* () {
    const found: Array<{ file: string; format: "json" | "toml" }> = []
    for (const [name, format] of [
      ["plugin.json", "json"],
      ["plugin.toml", "toml"]
    ] as const) {
      const file = join(dir, name)
      const exists = yield* Effect.promise(() =>
        stat(file).then(
          (s) => s.isFile(),
          () => false
        )
      )
      if (exists) found.push({ file, format })
    }
    if (found.length === 0) {
      return yield* new PluginLoadError({ file: dir, detail: "has no plugin.json or plugin.toml" })
    }
    if (found.length > 1) {
      return yield* new PluginLoadError({ file: dir, detail: "has both plugin.json and plugin.toml; keep one" })
    }
    return found[0]!
  })

const prepare = (dir: string, options: Options) =>
  Effect.gen(function* () {
    const { file, format } = yield* manifestFile(dir)
    const text = new TextDecoder().decode(yield* readLimited(file, maxManifestBytes))
    const manifest = yield* PluginManifest.parse(text, format).pipe(
      Effect.mapError((detail) => new PluginLoadError({ file, detail }))
    )
    const grant = options.grant ?? ["fs.read", "http.fetch"]
    const denied = manifest.capabilities.filter((c) => !grant.includes(c))
    if (denied.length > 0) {
      return yield* new PluginLoadError({
        file,
        detail: `asks for ${denied.join(", ")}, which this host does not grant to plugins`
      })
    }
    const ceilingPages = options.maxMemoryPages ?? defaults.maxMemoryPages
    const memoryPages = manifest.limits.memory_pages ?? ceilingPages
    if (memoryPages > ceilingPages) {
      return yield* new PluginLoadError({
        file,
        detail: `limits.memory_pages is ${memoryPages}; this host allows at most ${ceilingPages}`
      })
    }
    const ceilingMs = options.maxTimeoutMs ?? defaults.maxTimeoutMs
    const timeoutMs = manifest.limits.timeout_ms ?? Math.min(defaults.timeoutMs, ceilingMs)
    if (timeoutMs > ceilingMs) {
      return yield* new PluginLoadError({
        file,
        detail: `limits.timeout_ms is ${timeoutMs}; this host allows at most ${ceilingMs}`
      })
    }
    // The module must be inside the plugin's folder (no `..`, absolute path or symlink out of it).
    const moduleFile = yield* BuiltinTools.confine("plugin", dir, manifest.module).pipe(
      Effect.mapError(
        (e) => new PluginLoadError({ file, detail: `module: ${e.message} (it must be in the plugin folder)` })
      )
    )
    const bytes = yield* readLimited(moduleFile, maxModuleBytes)
    const digest = createHash("sha256").update(bytes).digest("hex")
    const limited = yield* Effect.try({
      try: () => limitMemory(bytes, memoryPages),
      catch: (cause) =>
        new PluginLoadError({ file: moduleFile, detail: cause instanceof Error ? cause.message : String(cause) })
    })
    const module = yield* Effect.tryPromise({
      try: () => wasm.compile(limited.bytes),
      catch: (cause) =>
        new PluginLoadError({
          file: moduleFile,
          detail: `does not compile: ${cause instanceof Error ? cause.message : String(cause)}`
        })
    })
    for (const imported of wasm.Module.imports(module)) {
      const allowed =
        imported.kind === "function" &&
        (imported.module === extismModule ||
          (imported.module === hostModule && (hostFunctions as ReadonlyArray<string>).includes(imported.name)))
      if (!allowed) {
        return yield* new PluginLoadError({
          file: moduleFile,
          detail: `imports ${imported.kind} ${imported.module}.${imported.name}; plugins get only Extism's and Palyra's host functions (no WASI)`
        })
      }
    }
    const exported = wasm.Module.exports(module).find((e) => e.name === manifest.export)
    if (exported?.kind !== "function") {
      return yield* new PluginLoadError({
        file: moduleFile,
        detail: `exports no function ${JSON.stringify(manifest.export)}`
      })
    }
    return { manifestFile: file, manifest, digest, moduleFile, module, memoryPages, timeoutMs } satisfies Prepared
  })

/** A thrown value's message (errors from Extism's worker arrive as plain `{ message }` objects). */
const describe = (cause: unknown): string =>
  cause instanceof Error
    ? cause.message
    : typeof cause === "object" && cause !== null && "message" in cause
      ? String(cause.message)
      : String(cause)

/** Decode `bytes` as UTF-8, refusing invalid sequences. */
const utf8 = (bytes: Uint8Array): string | undefined => {
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes)
  } catch {
    return undefined
  }
}

interface CallState {
  readonly calls: Array<HostCall>
  readonly signal: AbortSignal
}

/** The host functions of one call, bound to its state. */
const makeHost = (prepared: Prepared, options: Options, runtime: Runtime.Runtime<never>, state: CallState) => {
  const { manifest } = prepared
  const label = `plugin.${manifest.name}`
  const maxHostCalls = options.maxHostCalls ?? defaults.maxHostCalls
  const maxFileBytes = options.maxFileBytes ?? defaults.maxFileBytes
  const run = <A>(effect: Effect.Effect<A>) => Runtime.runPromise(runtime)(effect, { signal: state.signal })

  const record = (call: HostCall) => {
    if (state.calls.length < maxHostCalls) state.calls.push(call)
  }
  const gate = (fn: HostCall["fn"], capability: PluginManifest.Capability, target: string) => {
    if (state.calls.length >= maxHostCalls) {
      return fail("refused", `more than ${maxHostCalls} host calls in one call`)
    }
    if (!manifest.capabilities.includes(capability)) {
      record({ fn, target, ok: false, detail: `capability ${capability} not requested` })
      return fail("capability_not_granted", `this plugin did not ask for ${capability}`)
    }
    return undefined
  }

  const readFileFn = (context: CallContext, offset: bigint) => {
    const raw = context.read(offset)?.bytes()
    const path = raw === undefined ? undefined : utf8(raw)
    const target = path ?? "<invalid UTF-8>"
    const refused = gate("read_file", "fs.read", target)
    if (refused) return context.store(refused)
    if (path === undefined) return context.store(fail("invalid_request", "the path is not UTF-8"))
    const program = Effect.gen(function* () {
      const resolved = yield* BuiltinTools.confine(label, options.workspace, path)
      const info = yield* Effect.tryPromise(() => stat(resolved))
      if (!info.isFile()) return fail("refused", `${path} is not a file`)
      if (info.size > maxFileBytes) return fail("too_large", `${path} is ${info.size} bytes, over ${maxFileBytes}`)
      const bytes = new Uint8Array(yield* Effect.tryPromise(() => readFile(resolved)))
      record({ fn: "read_file", target: path, ok: true, detail: `${bytes.length} bytes` })
      return ok(bytes)
    }).pipe(
      Effect.catchAll((error) => {
        const reason = error._tag === "ToolError" ? error.reason : "failed"
        const message = error._tag === "ToolError" ? error.message : String(error.error)
        record({ fn: "read_file", target: path, ok: false, detail: `${reason}: ${message}` })
        return Effect.succeed(fail(reason, message))
      })
    )
    return run(program).then((reply) => context.store(reply))
  }

  const httpFetchFn = (context: CallContext, offset: bigint) => {
    const raw = context.read(offset)?.bytes()
    const text = raw === undefined ? undefined : utf8(raw)
    const request = text === undefined ? undefined : decodeFetchRequest(text)
    const target = request?._tag === "Right" ? request.right.url : "<invalid request>"
    const refused = gate("http_fetch", "http.fetch", target)
    if (refused) return context.store(refused)
    if (request?._tag !== "Right") {
      record({ fn: "http_fetch", target, ok: false, detail: "invalid request" })
      return context.store(fail("invalid_request", "expected JSON {url, method?, headers?, body?}"))
    }
    const http = options.http
    if (http === undefined || http.allowHosts.length === 0) {
      record({ fn: "http_fetch", target, ok: false, detail: "no hosts allowed" })
      return context.store(fail("host_not_allowed", "this host allows plugins no network hosts"))
    }
    const { url, method, headers, body } = request.right
    const program = NetGuard.safeFetch(url, {
      allowHosts: http.allowHosts,
      allowPrivateNetworks: http.allowPrivateNetworks,
      maxBytes: http.maxBytes ?? defaults.httpMaxBytes,
      timeoutMs: http.timeoutMs ?? defaults.httpTimeoutMs,
      resolver: http.resolver,
      method,
      headers,
      body
    }).pipe(
      Effect.map((response) => {
        record({ fn: "http_fetch", target: url, ok: true, detail: `status ${response.status}` })
        return ok(
          encoder.encode(
            JSON.stringify({
              url: response.url,
              status: response.status,
              headers: response.headers,
              body: new TextDecoder().decode(response.body),
              truncated: response.truncated
            })
          )
        )
      }),
      Effect.catchAll((error) => {
        record({ fn: "http_fetch", target: url, ok: false, detail: `${error.reason}: ${error.message}` })
        return Effect.succeed(fail(error.reason, error.message))
      })
    )
    return run(program).then((reply) => context.store(reply))
  }

  return { [hostModule]: { palyra_read_file: readFileFn, palyra_http_fetch: httpFetchFn } }
}

const asTool = (prepared: Prepared, options: Options): LoadedPlugin => {
  const { manifest, digest } = prepared
  const name = toolName(manifest.name, digest)
  const maxOutputBytes = options.maxOutputBytes ?? defaults.maxOutputBytes
  const semaphore = Effect.unsafeMakeSemaphore(options.concurrency ?? defaults.concurrency)
  let invocations = 0
  const failure = (reason: Errors.ToolError["reason"], message: string, cause?: unknown) =>
    new Errors.ToolError({ tool: name, reason, message, ...(cause === undefined ? {} : { cause }) })

  const execute = (args: unknown) =>
    Effect.gen(function* () {
      const runtime = yield* Effect.runtime<never>()
      const controller = new AbortController()
      const state: CallState = { calls: [], signal: controller.signal }
      // Extism counts its limit from the worker's start, not from the call.
      const startedAt = Date.now()
      const plugin = yield* Effect.acquireRelease(
        Effect.tryPromise({
          try: () =>
            createPlugin({ wasm: [{ module: prepared.module, name: "main" }] } as unknown as ManifestLike, {
              runInWorker: true,
              useWasi: false,
              allowedPaths: {},
              allowedHosts: [],
              fetch: refusingFetch,
              config: {},
              logger: quiet,
              functions: makeHost(prepared, options, runtime, state),
              timeoutMs: prepared.timeoutMs,
              memory: {
                maxPages: prepared.memoryPages,
                maxHttpResponseBytes: 0,
                maxVarBytes: 64 * 1024
              },
              // Nothing of the daemon's environment (tokens, keys) reaches the worker.
              nodeWorkerArgs: { env: {}, execArgv: ["--disable-warning=ExperimentalWarning"] }
            }),
          catch: (cause) => failure("failed", `could not start the plugin: ${describe(cause)}`, cause)
        }),
        (plugin: Plugin) =>
          Effect.sync(() => controller.abort()).pipe(Effect.zipRight(Effect.promise(() => plugin.close())))
      )
      invocations++
      const output = yield* Effect.tryPromise({
        try: () => plugin.call(manifest.export, JSON.stringify(args)),
        catch: (cause) => {
          const message = describe(cause)
          // Extism ends an over-time call by ending its worker; how that surfaces varies with timing,
          // so a failure at or past the limit is the limit.
          return /timeout/i.test(message) || Date.now() - startedAt >= prepared.timeoutMs
            ? failure("timeout", `the plugin ran past its ${prepared.timeoutMs} ms limit`, cause)
            : failure("failed", `the plugin failed: ${message}`, cause)
        }
      }).pipe(
        Effect.timeoutFail({
          duration: Duration.millis(prepared.timeoutMs + 250),
          onTimeout: () => failure("timeout", `the plugin ran past its ${prepared.timeoutMs} ms limit`)
        })
      )
      const bytes = output?.bytes() ?? new Uint8Array(0)
      if (bytes.length > maxOutputBytes) {
        return yield* failure("output_too_large", `the plugin returned ${bytes.length} bytes, over ${maxOutputBytes}`)
      }
      const text = new TextDecoder().decode(bytes)
      const value = Option.getOrElse(
        Option.liftThrowable((s: string): unknown => JSON.parse(s))(text),
        (): unknown => text
      )
      return {
        plugin: { name: manifest.name, digest: `sha256:${digest}` },
        output: value,
        hostCalls: state.calls
      }
    }).pipe(
      Effect.scoped,
      semaphore.withPermits(1),
      Effect.withSpan("Plugins.call", { attributes: { plugin: manifest.name, digest }, captureStackTrace: false })
    )

  const tool = Tool.fromJsonSchema(name, {
    description: manifest.description,
    parameters: manifest.parameters,
    risk: riskFloor(manifest),
    category: manifest.category,
    // The plugin's own limit ends the call first; this only backs it up (workers start in tens of ms).
    timeout: Duration.millis(prepared.timeoutMs + 2_000),
    idempotency: manifest.idempotent ? "idempotent" : "atMostOnce",
    execute
  })
  return {
    manifest,
    digest,
    moduleFile: prepared.moduleFile,
    memoryPages: prepared.memoryPages,
    timeoutMs: prepared.timeoutMs,
    tool,
    invocations: () => invocations
  }
}

/**
 * Load one plugin folder: parse and check its manifest, read its module (inside the folder),
 * digest it, set its memory limit, compile it and check its imports (only Extism's and Palyra's
 * host functions) and its export.
 *
 * @since 0.1.0
 * @category Loading
 */
export const load = (dir: string, options: Options): Effect.Effect<LoadedPlugin, PluginLoadError> =>
  prepare(dir, options).pipe(
    Effect.flatMap((prepared) =>
      Effect.try({
        try: () => asTool(prepared, options),
        // `Tool.fromJsonSchema` refuses a parameters schema Ajv rejects (strict mode).
        catch: (cause) =>
          new PluginLoadError({
            file: prepared.manifestFile,
            detail: cause instanceof Error ? cause.message : String(cause)
          })
      })
    ),
    Effect.withSpan("Plugins.load", { attributes: { dir }, captureStackTrace: false })
  )

/**
 * Load every plugin folder in `dir` (each sub-folder with a manifest; files, folders whose name
 * starts with `.` and folders with no manifest (logged) are skipped), in name order. The first plugin that does not load
 * fails the whole directory, naming its file: a plugins folder is configuration, and a daemon
 * that silently runs without a tool its operator installed is worse than one that says why it
 * cannot start. Two plugins with the same name fail too.
 *
 * @since 0.1.0
 * @category Loading
 */
export const loadPlugins = (dir: string, options: Options): Effect.Effect<Array<LoadedPlugin>, PluginLoadError> =>
  Effect.gen(function* () {
    const entries = yield* Effect.tryPromise({
      try: () => readdir(dir, { withFileTypes: true }),
      catch: (cause) =>
        new PluginLoadError({ file: dir, detail: cause instanceof Error ? cause.message : String(cause) })
    })
    const folders = entries
      .filter((e) => e.isDirectory() && !e.name.startsWith("."))
      .map((e) => e.name)
      .sort()
    const loaded: Array<LoadedPlugin> = []
    for (const folder of folders) {
      const hasManifest = yield* Effect.promise(() =>
        Promise.all(
          ["plugin.json", "plugin.toml"].map((name) =>
            stat(join(dir, folder, name)).then(
              () => true,
              () => false
            )
          )
        ).then((found) => found.some(Boolean))
      )
      if (!hasManifest) {
        yield* Effect.logWarning(
          `plugins: ${join(dir, folder)} has no plugin.json or plugin.toml; not a plugin, skipped`
        )
        continue
      }
      const plugin = yield* load(join(dir, folder), options)
      const twin = loaded.find((p) => p.manifest.name === plugin.manifest.name)
      if (twin !== undefined) {
        return yield* new PluginLoadError({
          file: join(dir, folder),
          detail: `another plugin is already named ${plugin.manifest.name} (${basename(twin.moduleFile)})`
        })
      }
      loaded.push(plugin)
    }
    return loaded
  })

/**
 * The tools of every plugin in `dir` (see `loadPlugins`), for `Kernel.layer({ tools })`.
 *
 * @since 0.1.0
 * @category Loading
 */
export const loadDirectory = (dir: string, options: Options): Effect.Effect<Array<Tool.AnyTool>, PluginLoadError> =>
  Effect.map(loadPlugins(dir, options), (plugins) => plugins.map((p) => p.tool))
