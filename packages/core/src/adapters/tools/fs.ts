/**
 * `fs.read`, `fs.list`, `fs.write`: confined to a workspace root. Paths are resolved inside the
 * root; `..` that leaves it, absolute paths elsewhere and symlinks that point outside are refused
 * (checked on the real path, after resolving links). Sizes are capped.
 *
 * @since 0.1.0
 */
import { lstat, mkdir, readdir, readFile, realpath, stat, writeFile } from "node:fs/promises"
import { dirname, isAbsolute, join, relative, resolve, sep } from "node:path"
import { Effect, Schema } from "effect"
import { ToolError } from "../../domain/Errors.js"
import * as Tool from "../../ports/Tool.js"
import { failed, refused } from "./internal.js"
/** @since 0.1.0 @category Models */
export interface FsOptions {
  /** The workspace root: nothing outside it is read or written. */
  readonly root: string
  /** Largest file read or written, in bytes (default 1 MiB). */
  readonly maxBytes?: number | undefined
}

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
  const read = Tool.makeLazy("fs.read", {
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
  const list = Tool.makeLazy("fs.list", {
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
  const write = Tool.makeLazy("fs.write", {
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
