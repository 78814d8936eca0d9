/**
 * `@palyra/journal`: the SQLite implementation of core's `Journal` service.
 *
 * @since 0.1.0
 */
export {}
