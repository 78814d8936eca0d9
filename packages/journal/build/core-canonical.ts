// The writer thread's bundle resolves `@palyra/core` here (tsup.config.ts): the hash chain needs
// only core's canonical JSON and SHA-256, not core (and effect) as a whole.
export * as Canonical from "../../core/src/domain/Canonical.ts"
