/**
 * `@palyra/channels`: chat platforms in front of the Gateway. Inbound messages are judged by the
 * `ChannelRouter` (admission rules, DM policy, pairing, per-sender isolation, broadcasts, coalescing,
 * dedupe) and reach the `Gateway` as the paired principal; replies leave through an idempotent
 * outbox. Connectors (a signed webhook, Telegram via grammY) are thin adapters behind one interface.
 *
 * @since 0.1.0
 */

export * as ChannelConfig from "./ChannelConfig.js"
export * as ChannelRouter from "./ChannelRouter.js"
export * as ChannelStore from "./ChannelStore.js"
export * as Channels from "./Channels.js"
export * as Coalescer from "./Coalescer.js"
export * as Codes from "./Codes.js"
export * as Connector from "./Connector.js"
export * as SignedWebhook from "./connectors/SignedWebhook.js"
export * as Telegram from "./connectors/Telegram.js"
export * as InboundMessage from "./InboundMessage.js"
export * as Mentions from "./Mentions.js"
export * as Outbox from "./Outbox.js"
export * as Pairing from "./Pairing.js"
export * as Rejection from "./Rejection.js"
export * as SessionKey from "./SessionKey.js"
export * as Settings from "./Settings.js"
export * as SqliteChannelStore from "./SqliteChannelStore.js"
