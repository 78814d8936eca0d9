/**
 * `http.fetch`: only hosts on an allowlist; names are resolved first and private, loopback and
 * link-local addresses are refused unless allowed; redirects are re-checked; size and time capped.
 *
 * @since 0.1.0
 */
import { lookup } from "node:dns/promises"
import { isIP } from "node:net"
import { Effect, Schema } from "effect"
import * as Tool from "../../ports/Tool.js"
import { failed, refused } from "./internal.js"

/** @since 0.1.0 @category Models */
export interface HttpOptions {
  /** Hosts that may be fetched: exact names, or `*.example.com` for subdomains. Empty: none. */
  readonly allowHosts: ReadonlyArray<string>
  /** Allow private, loopback and link-local addresses (default false). */
  readonly allowPrivateNetworks?: boolean | undefined
  readonly maxBytes?: number | undefined
  readonly timeoutMs?: number | undefined
}

const privateV4 = (ip: string) => {
  const [a = 0, b = 0] = ip.split(".").map(Number)
  return (
    a === 10 ||
    a === 127 ||
    a === 0 ||
    (a === 169 && b === 254) ||
    (a === 172 && b >= 16 && b <= 31) ||
    (a === 192 && b === 168) ||
    (a === 100 && b >= 64 && b <= 127) ||
    a >= 224
  )
}
const privateV6 = (ip: string) => {
  const v = ip.toLowerCase()
  if (v.startsWith("::ffff:")) return privateV4(v.slice(7))
  return (
    v === "::" ||
    v === "::1" ||
    v.startsWith("fc") ||
    v.startsWith("fd") ||
    v.startsWith("fe8") ||
    v.startsWith("fe9") ||
    v.startsWith("fea") ||
    v.startsWith("feb")
  )
}

/** True for addresses `http.fetch` refuses by default. @since 0.1.0 @category Utils */
export const isPrivateAddress = (ip: string): boolean => (isIP(ip) === 6 ? privateV6(ip) : privateV4(ip))

const hostAllowed = (allow: ReadonlyArray<string>, host: string) =>
  allow.some((pattern) => {
    const p = pattern.toLowerCase()
    const h = host.toLowerCase()
    return p.startsWith("*.") ? h.endsWith(p.slice(1)) && h.length > p.length - 1 : h === p
  })

/** `http.fetch` with a host allowlist and no private networks by default. @since 0.1.0 @category Tools */
export const httpTool = (options: HttpOptions): Tool.AnyTool => {
  const maxBytes = options.maxBytes ?? 512 * 1024
  const timeoutMs = options.timeoutMs ?? 15_000
  const check = (url: URL) =>
    Effect.gen(function* () {
      if (url.protocol !== "http:" && url.protocol !== "https:") {
        return yield* refused("http.fetch", `scheme ${url.protocol} is not allowed`)
      }
      const host = url.hostname.replace(/^\[|\]$/g, "")
      if (!hostAllowed(options.allowHosts, host)) {
        return yield* refused("http.fetch", `host ${host} is not on the allowlist`)
      }
      if (options.allowPrivateNetworks) return
      const addresses = isIP(host)
        ? [host]
        : yield* Effect.tryPromise({
            try: () => lookup(host, { all: true }).then((r) => r.map((a) => a.address)),
            catch: failed("http.fetch")
          })
      const bad = addresses.find(isPrivateAddress)
      if (bad) return yield* refused("http.fetch", `host ${host} resolves to a private address (${bad})`)
    })
  return Tool.make("http.fetch", {
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
      Effect.gen(function* () {
        let url = yield* Effect.try({
          try: () => new URL(args.url),
          catch: () => refused("http.fetch", `not a URL: ${args.url}`)
        })
        for (let hop = 0; hop < 5; hop++) {
          yield* check(url)
          const target = url
          const response = yield* Effect.tryPromise({
            try: (signal) =>
              fetch(target, {
                method: args.method,
                ...(args.headers ? { headers: args.headers } : {}),
                ...(args.body !== undefined && args.method === "POST" ? { body: args.body } : {}),
                redirect: "manual",
                signal: AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)])
              }),
            catch: failed("http.fetch")
          })
          const location = response.headers.get("location")
          if (response.status >= 300 && response.status < 400 && location) {
            url = new URL(location, url)
            continue
          }
          const reader = response.body?.getReader()
          const chunks: Array<Uint8Array> = []
          let size = 0
          let truncated = false
          while (reader) {
            const { done, value } = yield* Effect.promise(() => reader.read())
            if (done) break
            size += value.length
            if (size > maxBytes) {
              truncated = true
              chunks.push(value.subarray(0, value.length - (size - maxBytes)))
              yield* Effect.promise(() => reader.cancel())
              break
            }
            chunks.push(value)
          }
          return {
            status: response.status,
            contentType: response.headers.get("content-type"),
            body: Buffer.concat(chunks).toString("utf8"),
            truncated
          }
        }
        return yield* refused("http.fetch", "too many redirects")
      })
  })
}
