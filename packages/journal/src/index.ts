/**
 * `@palyra/journal`: the SQLite implementation of core's `Journal` service.
 *
 * Effect API: `SqliteJournal.layer({ filename })`. Promise API: `sqliteJournal({ filename })`, passed to
 * `createPalyra({ journal })`.
 *
 * @since 0.1.0
 */
export * as SqliteJournal from "./SqliteJournal.js"
export { sqliteJournal } from "./SqliteJournal.js"
