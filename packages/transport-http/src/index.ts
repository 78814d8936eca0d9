/**
 * `@palyra/transport-http`: the Gateway over HTTP (REST + server-sent events).
 *
 * @since 0.1.0
 */
export * as HttpTransport from "./HttpTransport.js"
