/**
 * `@palyra/transport-http` is planned and not implemented yet; see the open issues.
 *
 * @since 0.1.0
 */
export const implemented = false as const
