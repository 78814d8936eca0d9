/**
 * `@palyra/core/tools`: the built-in tools (workspace files, argv shell, allowlisted HTTP, time,
 * session notes), each safe by construction, and `NetGuard`, the guarded fetch behind `http.fetch`.
 *
 * @since 0.1.0
 */
export * as BuiltinTools from "./adapters/tools/BuiltinTools.js"
export * as NetGuard from "./adapters/tools/net.js"
