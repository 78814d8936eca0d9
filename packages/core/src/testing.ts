/**
 * `@palyra/core/testing`: what you need to unit-test an agent — a real in-memory journal, a scripted
 * model that records its prompts, and a ready Gateway layer over them.
 *
 * @since 0.1.0
 */
export * from "./testing/Testing.js"
