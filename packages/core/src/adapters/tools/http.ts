/**
 * `http.fetch`: the guarded fetch of `net.ts` as a tool. Only hosts on an allowlist; each name is
 * resolved once and every address checked (private, loopback and link-local refused unless
 * allowed, special-purpose addresses always), and the connection goes to the checked address;
 * redirects are re-checked hop by hop; size and time capped.
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import { ToolError } from "../../domain/Errors.js"
import * as Tool from "../../ports/Tool.js"
import { type FetchFailed, type FetchRefused, type Resolver, safeFetch } from "./net.js"

/** @since 0.1.0 @category Models */
export interface HttpOptions {
  /** Hosts that may be fetched: exact names, or `*.example.com` for subdomains. Empty: none. */
  readonly allowHosts: ReadonlyArray<string>
  /** Allow private, loopback and link-local addresses (default false). */
  readonly allowPrivateNetworks?: boolean | undefined
  readonly maxBytes?: number | undefined
  readonly timeoutMs?: number | undefined
  /** Name resolution (default: the system resolver). */
  readonly resolver?: Resolver | undefined
}

const toToolError = (error: FetchRefused | FetchFailed) =>
  new ToolError({
    tool: "http.fetch",
    reason: error._tag === "FetchRefused" ? "refused" : error.reason === "timeout" ? "timeout" : "failed",
    message: `${error.reason}: ${error.message}`,
    ...(error._tag === "FetchFailed" && error.cause !== undefined ? { cause: error.cause } : {})
  })

/** `http.fetch` with a host allowlist and no private networks by default. @since 0.1.0 @category Tools */
export const httpTool = (options: HttpOptions): Tool.AnyTool => {
  const timeoutMs = options.timeoutMs ?? 15_000
  return Tool.makeLazy("http.fetch", {
    description: "Fetch a URL from an allowed host (GET or POST); returns status, content type and body text.",
    parameters: Schema.Struct({
      url: Schema.String,
      method: Schema.optionalWith(Schema.Literal("GET", "POST", "HEAD"), { default: () => "GET" }),
      headers: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.String })),
      body: Schema.optional(Schema.String)
    }),
    risk: "sensitive",
    category: "network",
    idempotency: "atMostOnce",
    timeout: `${timeoutMs + 1000} millis`,
    execute: (args) =>
      safeFetch(args.url, {
        allowHosts: options.allowHosts,
        allowPrivateNetworks: options.allowPrivateNetworks,
        maxBytes: options.maxBytes,
        timeoutMs,
        resolver: options.resolver,
        method: args.method,
        headers: args.headers,
        body: args.body
      }).pipe(
        Effect.map((response) => ({
          status: response.status,
          contentType: response.headers["content-type"] ?? null,
          body: new TextDecoder().decode(response.body),
          truncated: response.truncated
        })),
        Effect.mapError(toToolError)
      )
  })
}
