/**
 * `@palyra/channels/config`: the `[[channels]]` configuration schema alone, without the connectors
 * (grammY and friends), so a host can validate its configuration without loading them.
 *
 * @since 0.1.0
 */
export * as ChannelConfig from "./ChannelConfig.js"
