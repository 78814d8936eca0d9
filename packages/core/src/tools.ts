/**
 * `@palyra/core/tools`: the built-in tools (workspace files, argv shell, allowlisted HTTP, time,
 * session notes), each safe by construction.
 *
 * @since 0.1.0
 */
export * as BuiltinTools from "./adapters/tools/BuiltinTools.js"
