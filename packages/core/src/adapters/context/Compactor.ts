/**
 * The `Compactor` port now lives in `ports/Compactor.ts` (the Gateway uses it); re-exported here for
 * the context engine's modules.
 *
 * @since 0.1.0
 */
export * from "../../ports/Compactor.js"
