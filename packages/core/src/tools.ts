/**
 * `@palyra/core/tools`: the built-in tools (workspace files, argv shell, allowlisted HTTP, time,
 * session notes), each safe by construction; `NetGuard`, the guarded fetch behind `http.fetch`; and
 * `Sandbox`, the tiers (`none`, `limits`, `os`) for any process a tool starts; `Processes`, the
 * registry of live tool process groups the watchdog reads.
 *
 * @since 0.1.0
 */
export * as BuiltinTools from "./adapters/tools/BuiltinTools.js"
export * as NetGuard from "./adapters/tools/net.js"
export * as Processes from "./adapters/tools/sandbox/Processes.js"
export * as Sandbox from "./adapters/tools/sandbox/Sandbox.js"
