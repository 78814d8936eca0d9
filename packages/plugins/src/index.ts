/**
 * `@palyra/plugins`: WebAssembly plugin tools. Drop a folder with a module and a manifest into a
 * plugins directory; `Plugins.loadDirectory` turns each into a `Tool` run by Extism, a fresh
 * sandboxed instance per call, with memory and time limits and only capability-scoped host
 * functions, identified by its SHA-256 digest.
 *
 * @since 0.1.0
 */
export * as PluginManifest from "./PluginManifest.js"
export * as Plugins from "./Plugins.js"
