/**
 * `@palyra/daemon`: the `palyrad` binary and the `palyra` CLI.
 *
 * @since 0.1.0
 */
export const implemented = false as const
