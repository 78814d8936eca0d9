/**
 * `@palyra/core/cedar`: the Cedar policy engine (loads `@cedar-policy/cedar-wasm`).
 *
 * @since 0.1.0
 */
export * as CedarPolicy from "./adapters/cedar/CedarPolicy.js"
