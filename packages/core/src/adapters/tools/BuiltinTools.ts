/**
 * Built-in tools, each safe by construction:
 *
 * - `fs.read`, `fs.list`, `fs.write`: confined to a workspace root. Paths are resolved inside the
 *   root; `..` that leaves it, absolute paths elsewhere and symlinks that point outside are refused
 *   (checked on the real path, after resolving links). Sizes are capped.
 * - `shell.exec`: argv form only (no shell, no string interpolation), cwd inside the workspace, a
 *   scrubbed environment, a timeout and an output cap; it runs in its own process group, which is
 *   killed on timeout and on cancellation, so no child outlives the call. A sandbox tier (`none`,
 *   `limits`, `os`: see `Sandbox`) adds an executable allowlist, rlimits and OS isolation.
 * - `http.fetch`: only hosts on an allowlist; each name is resolved once and every address checked
 *   (private, loopback and link-local refused unless allowed, special-purpose addresses always);
 *   the socket goes to the checked address; redirects are re-checked; size and time capped. The
 *   guard itself is `NetGuard.safeFetch` (`@palyra/core/tools`).
 * - `time.now`, `session.note`.
 *
 * @since 0.1.0
 */
import { Clock, Effect, Schema } from "effect"
import * as Tool from "../../ports/Tool.js"
import { fsTools } from "./fs.js"
import { type HttpOptions, httpTool } from "./http.js"
import type * as Sandbox from "./sandbox/Sandbox.js"
import { type ShellOptions, shellTool } from "./shell.js"

export { confine, type FsOptions, fsTools } from "./fs.js"
export { type HttpOptions, httpTool } from "./http.js"
export { isPrivateAddress } from "./net.js"
export * as Sandbox from "./sandbox/Sandbox.js"
export { type ShellOptions, shellTool } from "./shell.js"

/** `time.now`. @since 0.1.0 @category Tools */
export const timeTool: Tool.AnyTool = Tool.makeLazy("time.now", {
  description: "The current date and time (UTC, ISO 8601) and the Unix time in milliseconds.",
  parameters: Schema.Struct({}),
  risk: "low",
  category: "time",
  idempotency: "idempotent",
  // It reads the clock, nothing else: its decision, start and result commit together (one append).
  instant: true,
  execute: () => Effect.map(Clock.currentTimeMillis, (ms) => ({ iso: new Date(ms).toISOString(), epochMs: ms }))
})

/** `session.note`: the agent writes a note onto the session's tape. @since 0.1.0 @category Tools */
export const noteTool: Tool.AnyTool = Tool.makeLazy("session.note", {
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
  /** The sandbox of every tool that starts processes (`shell.sandbox` wins for `shell.exec`). */
  readonly sandbox?: Sandbox.Options | undefined
  readonly maxFileBytes?: number | undefined
}

/** Every built-in tool for one workspace. @since 0.1.0 @category Tools */
export const all = (options: BuiltinOptions): Array<Tool.AnyTool> => [
  ...fsTools({ root: options.workspace, maxBytes: options.maxFileBytes }),
  shellTool({ root: options.workspace, ...options.shell, sandbox: options.shell?.sandbox ?? options.sandbox }),
  httpTool(options.http ?? { allowHosts: [] }),
  timeTool,
  noteTool
]
