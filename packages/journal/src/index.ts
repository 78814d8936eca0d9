/**
 * `@palyra/journal`: the SQLite implementation of core's `Journal` service.
 *
 * Effect API: `SqliteJournal.layer({ filename })`. Promise API: `sqliteJournal({ filename })`, passed to
 * `createPalyra({ journal })`. `Anchor.layer({ keyFile, witnessFile })` signs checkpoints of the
 * journal's chains into a witness file; `Anchor.verify` checks a journal against them.
 * `SqliteTaskQueue.layer({ filename })` and `SqliteMemoryStore.layer({ filename })` put the
 * background queue and memory (ports of `@palyra/core/memory`) in the same file, and
 * `SqliteBlobStore.layer({ filename })` message attachments (core's `BlobStore`).
 *
 * @since 0.1.0
 */
export * as Anchor from "./Anchor.js"
export * as SqliteBlobStore from "./SqliteBlobStore.js"
export * as SqliteJournal from "./SqliteJournal.js"
export { sqliteJournal } from "./SqliteJournal.js"
export * as SqliteMemoryStore from "./SqliteMemoryStore.js"
export * as SqliteTaskQueue from "./SqliteTaskQueue.js"
export * as SqliteVectorIndex from "./SqliteVectorIndex.js"
