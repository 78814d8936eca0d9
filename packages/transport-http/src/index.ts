/**
 * `@palyra/transport-http`: the Gateway over HTTP (REST + server-sent events + OpenAI-compatible
 * chat completions + Prometheus metrics), described once as a typed `HttpApi`.
 *
 * @since 0.1.0
 */
export * as Api from "./Api.js"
export * as PairingGroup from "./api/PairingGroup.js"
export * as HttpTransport from "./HttpTransport.js"
export * as Sse from "./Sse.js"
