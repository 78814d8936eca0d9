/**
 * `@palyra/core/journal-contract`: the behaviour every `Journal` adapter must show, as a vitest suite.
 *
 * @since 0.1.0
 */
export * from "./testing/JournalContract.js"
