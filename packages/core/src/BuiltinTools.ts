/**
 * Built-in tools, each safe by construction:
 *
 * - `fs.read`, `fs.list`, `fs.write`: confined to a workspace root. Paths are resolved inside the
 *   root; `..` that leaves it, absolute paths elsewhere and symlinks that point outside are refused
 *   (checked on the real path, after resolving links). Sizes are capped.
 * - `shell.exec`: argv form only (no shell, no string interpolation), cwd inside the workspace, a
 *   scrubbed environment, a timeout and an output cap; it runs in its own process group, which is
 *   killed on timeout and on cancellation, so no child outlives the call.
 * - `http.fetch`: only hosts on an allowlist; names are resolved first and private, loopback and
 *   link-local addresses are refused unless allowed; redirects are re-checked; size and time capped.
 * - `time.now`, `session.note`.
 *
 * @since 0.1.0
 */
import { type ChildProcess, spawn } from "node:child_process"
import { lookup } from "node:dns/promises"
import { lstat, mkdir, readdir, readFile, realpath, stat, writeFile } from "node:fs/promises"
import { isIP } from "node:net"
import { dirname, isAbsolute, join, relative, resolve, sep } from "node:path"
import { Clock, Effect, Schema } from "effect"
import { ToolError } from "./Errors.js"
import * as Tool from "./Tool.js"

/** @since 0.1.0 @category Models */
export interface FsOptions {
  /** The workspace root: nothing outside it is read or written. */
  readonly root: string
  /** Largest file read or written, in bytes (default 1 MiB). */
  readonly maxBytes?: number | undefined
}

const refused = (tool: string, message: string) => new ToolError({ tool, reason: "refused", message })
const failed = (tool: string) => (cause: unknown) =>
  new ToolError({ tool, reason: "failed", message: cause instanceof Error ? cause.message : String(cause), cause })

const within = (root: string, target: string) => {
  const rel = relative(root, target)
  return rel === "" || (!rel.startsWith(`..${sep}`) && rel !== ".." && !isAbsolute(rel))
}

/**
 * Resolve `path` inside `root`, refusing escapes by `..`, by absolute paths and by symlinks
 * (the deepest existing ancestor's real path must stay inside the root's real path).
 *
 * @since 0.1.0
 * @category Utils
 */
export const confine = (tool: string, root: string, path: string): Effect.Effect<string, ToolError> =>
  Effect.tryPromise({
    try: async () => {
      if (path.includes("\0")) throw refused(tool, "path contains a NUL byte")
      const realRoot = await realpath(root)
      const target = resolve(realRoot, path)
      if (!within(realRoot, target)) throw refused(tool, `path ${JSON.stringify(path)} is outside the workspace`)
      // Walk up to the deepest part that exists and check where it really points.
      let probe = target
      while (true) {
        try {
          const real = await realpath(probe)
          if (!within(realRoot, real)) {
            throw refused(tool, `path ${JSON.stringify(path)} leads outside the workspace through a symlink`)
          }
          break
        } catch (error) {
          if (error instanceof ToolError) throw error
          const parent = dirname(probe)
          if (parent === probe) break
          probe = parent
        }
      }
      return target
    },
    catch: (e) => (e instanceof ToolError ? e : failed(tool)(e))
  })

/** `fs.read`, `fs.list`, `fs.write` over a workspace root. @since 0.1.0 @category Tools */
export const fsTools = (options: FsOptions): Array<Tool.AnyTool> => {
  const maxBytes = options.maxBytes ?? 1024 * 1024
  const read = Tool.make("fs.read", {
    description: "Read a UTF-8 text file from the workspace.",
    parameters: Schema.Struct({ path: Schema.String.pipe(Schema.minLength(1)) }),
    risk: "low",
    category: "fs.read",
    idempotency: "idempotent",
    timeout: "10 seconds",
    execute: ({ path }) =>
      Effect.gen(function* () {
        const target = yield* confine("fs.read", options.root, path)
        const info = yield* Effect.tryPromise({ try: () => stat(target), catch: failed("fs.read") })
        if (!info.isFile()) return yield* refused("fs.read", `${path} is not a file`)
        if (info.size > maxBytes) {
          return yield* new ToolError({
            tool: "fs.read",
            reason: "output_too_large",
            message: `${path} is ${info.size} bytes, over the limit of ${maxBytes}`
          })
        }
        return yield* Effect.tryPromise({ try: () => readFile(target, "utf8"), catch: failed("fs.read") })
      })
  })
  const list = Tool.make("fs.list", {
    description: "List a directory of the workspace (names, kinds, sizes).",
    parameters: Schema.Struct({ path: Schema.optionalWith(Schema.String, { default: () => "." }) }),
    risk: "low",
    category: "fs.read",
    idempotency: "idempotent",
    timeout: "10 seconds",
    execute: ({ path }) =>
      Effect.gen(function* () {
        const target = yield* confine("fs.list", options.root, path)
        const entries = yield* Effect.tryPromise({
          try: () => readdir(target, { withFileTypes: true }),
          catch: failed("fs.list")
        })
        const out: Array<{ name: string; kind: string; size?: number }> = []
        for (const e of entries.slice(0, 1000)) {
          const kind = e.isDirectory() ? "dir" : e.isSymbolicLink() ? "symlink" : e.isFile() ? "file" : "other"
          const size =
            kind === "file" ? yield* Effect.promise(() => lstat(join(target, e.name)).then((s) => s.size)) : undefined
          out.push(size === undefined ? { name: e.name, kind } : { name: e.name, kind, size })
        }
        return out.sort((a, b) => a.name.localeCompare(b.name))
      })
  })
  const write = Tool.make("fs.write", {
    description: "Write a UTF-8 text file in the workspace (creating parent folders).",
    parameters: Schema.Struct({
      path: Schema.String.pipe(Schema.minLength(1)),
      content: Schema.String,
      mode: Schema.optionalWith(Schema.Literal("overwrite", "create", "append"), { default: () => "overwrite" })
    }),
    risk: "sensitive",
    category: "fs.write",
    timeout: "10 seconds",
    execute: ({ path, content, mode }) =>
      Effect.gen(function* () {
        const size = Buffer.byteLength(content)
        if (size > maxBytes) {
          return yield* refused("fs.write", `content is ${size} bytes, over the limit of ${maxBytes}`)
        }
        const target = yield* confine("fs.write", options.root, path)
        const existing = yield* Effect.promise(() => lstat(target).catch(() => undefined))
        if (existing?.isSymbolicLink())
          return yield* refused("fs.write", `${path} is a symlink; not writing through it`)
        if (existing?.isDirectory()) return yield* refused("fs.write", `${path} is a directory`)
        if (existing && mode === "create") return yield* refused("fs.write", `${path} exists (mode create)`)
        yield* Effect.tryPromise({ try: () => mkdir(dirname(target), { recursive: true }), catch: failed("fs.write") })
        // Re-check after creating folders: nothing may have been swapped for a link meanwhile.
        yield* confine("fs.write", options.root, path)
        yield* Effect.tryPromise({
          try: () => writeFile(target, content, { flag: mode === "append" ? "a" : mode === "create" ? "wx" : "w" }),
          catch: failed("fs.write")
        })
        return { path, bytes: size, mode }
      })
  })
  return [read, list, write]
}

/** @since 0.1.0 @category Models */
export interface ShellOptions {
  /** Commands run with their cwd inside this root. */
  readonly root: string
  /** Default and largest timeout, in ms (default 30 s). */
  readonly timeoutMs?: number | undefined
  /** Output cap for stdout and stderr together, in bytes (default 64 KiB). */
  readonly maxOutputBytes?: number | undefined
  /** Environment passed to commands (default: PATH, LANG and HOME = the root only). */
  readonly env?: Readonly<Record<string, string>> | undefined
}

const killGroup = (child: ChildProcess) => {
  if (child.pid === undefined) return
  try {
    process.kill(-child.pid, "SIGKILL")
  } catch {
    // already gone
  }
}

/** `shell.exec`: argv only, confined cwd, scrubbed env, timeout, output cap, group kill. @since 0.1.0 @category Tools */
export const shellTool = (options: ShellOptions): Tool.AnyTool => {
  const maxTimeout = options.timeoutMs ?? 30_000
  const maxOutput = options.maxOutputBytes ?? 64 * 1024
  const env = options.env ?? {
    PATH: process.env.PATH ?? "/usr/local/bin:/usr/bin:/bin",
    LANG: "C.UTF-8",
    HOME: options.root
  }
  return Tool.make("shell.exec", {
    description: "Run a program with arguments (argv form; no shell features such as pipes or globs) in the workspace.",
    parameters: Schema.Struct({
      argv: Schema.Array(Schema.String).pipe(Schema.minItems(1), Schema.maxItems(256)),
      cwd: Schema.optionalWith(Schema.String, { default: () => "." }),
      timeoutMs: Schema.optional(Schema.Int.pipe(Schema.between(1, 3_600_000)))
    }),
    risk: "sensitive",
    category: "shell",
    timeout: `${maxTimeout + 5_000} millis`,
    execute: ({ argv, cwd, timeoutMs }) =>
      Effect.gen(function* () {
        const dir = yield* confine("shell.exec", options.root, cwd)
        const limit = Math.min(timeoutMs ?? maxTimeout, maxTimeout)
        return yield* Effect.async<
          {
            exitCode: number | null
            signal: string | null
            stdout: string
            stderr: string
            truncated: boolean
            pid: number | undefined
            timedOut: boolean
          },
          ToolError
        >((resume) => {
          const child = spawn(argv[0]!, argv.slice(1), {
            cwd: dir,
            env: { ...env },
            detached: true, // its own process group, so the whole group can be killed
            stdio: ["ignore", "pipe", "pipe"],
            shell: false
          })
          let out = ""
          let err = ""
          let bytes = 0
          let truncated = false
          let timedOut = false
          const take = (chunk: Buffer, into: "out" | "err") => {
            const room = maxOutput - bytes
            if (room <= 0) {
              truncated = true
              return
            }
            const piece = chunk.subarray(0, room).toString("utf8")
            bytes += Math.min(chunk.length, room)
            if (chunk.length > room) truncated = true
            if (into === "out") out += piece
            else err += piece
          }
          child.stdout!.on("data", (c: Buffer) => take(c, "out"))
          child.stderr!.on("data", (c: Buffer) => take(c, "err"))
          const timer = setTimeout(() => {
            timedOut = true
            killGroup(child)
          }, limit)
          child.on("error", (e) => {
            clearTimeout(timer)
            resume(Effect.fail(failed("shell.exec")(e)))
          })
          child.on("close", (code, signal) => {
            clearTimeout(timer)
            killGroup(child) // reap anything it left running in its group
            resume(
              Effect.succeed({
                exitCode: code,
                signal,
                stdout: out,
                stderr: err,
                truncated,
                pid: child.pid,
                timedOut
              })
            )
          })
          // Cancellation: kill the whole process group.
          return Effect.sync(() => {
            clearTimeout(timer)
            killGroup(child)
          })
        }).pipe(
          Effect.flatMap((r) =>
            r.timedOut
              ? Effect.fail(
                  new ToolError({
                    tool: "shell.exec",
                    reason: "timeout",
                    message: `killed after ${limit} ms (process group ${r.pid}); output so far: ${r.stdout.slice(0, 2000)}`
                  })
                )
              : Effect.succeed({
                  exitCode: r.exitCode,
                  signal: r.signal,
                  stdout: r.stdout,
                  stderr: r.stderr,
                  truncated: r.truncated
                })
          )
        )
      })
  })
}

/** @since 0.1.0 @category Models */
export interface HttpOptions {
  /** Hosts that may be fetched: exact names, or `*.example.com` for subdomains. Empty: none. */
  readonly allowHosts: ReadonlyArray<string>
  /** Allow private, loopback and link-local addresses (default false). */
  readonly allowPrivateNetworks?: boolean | undefined
  readonly maxBytes?: number | undefined
  readonly timeoutMs?: number | undefined
}

const privateV4 = (ip: string) => {
  const [a = 0, b = 0] = ip.split(".").map(Number)
  return (
    a === 10 ||
    a === 127 ||
    a === 0 ||
    (a === 169 && b === 254) ||
    (a === 172 && b >= 16 && b <= 31) ||
    (a === 192 && b === 168) ||
    (a === 100 && b >= 64 && b <= 127) ||
    a >= 224
  )
}
const privateV6 = (ip: string) => {
  const v = ip.toLowerCase()
  if (v.startsWith("::ffff:")) return privateV4(v.slice(7))
  return (
    v === "::" ||
    v === "::1" ||
    v.startsWith("fc") ||
    v.startsWith("fd") ||
    v.startsWith("fe8") ||
    v.startsWith("fe9") ||
    v.startsWith("fea") ||
    v.startsWith("feb")
  )
}

/** True for addresses `http.fetch` refuses by default. @since 0.1.0 @category Utils */
export const isPrivateAddress = (ip: string): boolean => (isIP(ip) === 6 ? privateV6(ip) : privateV4(ip))

const hostAllowed = (allow: ReadonlyArray<string>, host: string) =>
  allow.some((pattern) => {
    const p = pattern.toLowerCase()
    const h = host.toLowerCase()
    return p.startsWith("*.") ? h.endsWith(p.slice(1)) && h.length > p.length - 1 : h === p
  })

/** `http.fetch` with a host allowlist and no private networks by default. @since 0.1.0 @category Tools */
export const httpTool = (options: HttpOptions): Tool.AnyTool => {
  const maxBytes = options.maxBytes ?? 512 * 1024
  const timeoutMs = options.timeoutMs ?? 15_000
  const check = (url: URL) =>
    Effect.gen(function* () {
      if (url.protocol !== "http:" && url.protocol !== "https:") {
        return yield* refused("http.fetch", `scheme ${url.protocol} is not allowed`)
      }
      const host = url.hostname.replace(/^\[|\]$/g, "")
      if (!hostAllowed(options.allowHosts, host)) {
        return yield* refused("http.fetch", `host ${host} is not on the allowlist`)
      }
      if (options.allowPrivateNetworks) return
      const addresses = isIP(host)
        ? [host]
        : yield* Effect.tryPromise({
            try: () => lookup(host, { all: true }).then((r) => r.map((a) => a.address)),
            catch: failed("http.fetch")
          })
      const bad = addresses.find(isPrivateAddress)
      if (bad) return yield* refused("http.fetch", `host ${host} resolves to a private address (${bad})`)
    })
  return Tool.make("http.fetch", {
    description: "Fetch a URL from an allowed host (GET or POST); returns status, content type and body text.",
    parameters: Schema.Struct({
      url: Schema.String,
      method: Schema.optionalWith(Schema.Literal("GET", "POST", "HEAD"), { default: () => "GET" }),
      headers: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.String })),
      body: Schema.optional(Schema.String)
    }),
    risk: "sensitive",
    category: "network",
    idempotency: "atMostOnce",
    timeout: `${timeoutMs + 1000} millis`,
    execute: (args) =>
      Effect.gen(function* () {
        let url = yield* Effect.try({
          try: () => new URL(args.url),
          catch: () => refused("http.fetch", `not a URL: ${args.url}`)
        })
        for (let hop = 0; hop < 5; hop++) {
          yield* check(url)
          const target = url
          const response = yield* Effect.tryPromise({
            try: (signal) =>
              fetch(target, {
                method: args.method,
                ...(args.headers ? { headers: args.headers } : {}),
                ...(args.body !== undefined && args.method === "POST" ? { body: args.body } : {}),
                redirect: "manual",
                signal: AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)])
              }),
            catch: failed("http.fetch")
          })
          const location = response.headers.get("location")
          if (response.status >= 300 && response.status < 400 && location) {
            url = new URL(location, url)
            continue
          }
          const reader = response.body?.getReader()
          const chunks: Array<Uint8Array> = []
          let size = 0
          let truncated = false
          while (reader) {
            const { done, value } = yield* Effect.promise(() => reader.read())
            if (done) break
            size += value.length
            if (size > maxBytes) {
              truncated = true
              chunks.push(value.subarray(0, value.length - (size - maxBytes)))
              yield* Effect.promise(() => reader.cancel())
              break
            }
            chunks.push(value)
          }
          return {
            status: response.status,
            contentType: response.headers.get("content-type"),
            body: Buffer.concat(chunks).toString("utf8"),
            truncated
          }
        }
        return yield* refused("http.fetch", "too many redirects")
      })
  })
}

/** `time.now`. @since 0.1.0 @category Tools */
export const timeTool: Tool.AnyTool = Tool.make("time.now", {
  description: "The current date and time (UTC, ISO 8601) and the Unix time in milliseconds.",
  parameters: Schema.Struct({}),
  risk: "low",
  category: "time",
  idempotency: "idempotent",
  execute: () => Effect.map(Clock.currentTimeMillis, (ms) => ({ iso: new Date(ms).toISOString(), epochMs: ms }))
})

/** `session.note`: the agent writes a note onto the session's tape. @since 0.1.0 @category Tools */
export const noteTool: Tool.AnyTool = Tool.make("session.note", {
  description: "Write a short note onto this session's permanent record.",
  parameters: Schema.Struct({ text: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(4000)) }),
  risk: "low",
  category: "session",
  execute: ({ text }, context) => Effect.as(context.note(text), "noted")
})

/** @since 0.1.0 @category Models */
export interface BuiltinOptions {
  readonly workspace: string
  readonly http?: HttpOptions | undefined
  readonly shell?: Omit<ShellOptions, "root"> | undefined
  readonly maxFileBytes?: number | undefined
}

/** Every built-in tool for one workspace. @since 0.1.0 @category Tools */
export const all = (options: BuiltinOptions): Array<Tool.AnyTool> => [
  ...fsTools({ root: options.workspace, maxBytes: options.maxFileBytes }),
  shellTool({ root: options.workspace, ...options.shell }),
  httpTool(options.http ?? { allowHosts: [] }),
  timeTool,
  noteTool
]
