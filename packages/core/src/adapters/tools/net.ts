/**
 * A guarded HTTP fetch for anything that reaches the network on a model's behalf (`http.fetch`,
 * and later `@url:` context references).
 *
 * - **Hosts:** only names on an allowlist (exact, or `*.example.com` for subdomains; an IP literal
 *   on the list matches that address however it is spelled). Empty list: nothing.
 * - **Addresses:** a name is resolved **once**; every address it resolves to is classified with
 *   `ipaddr.js` (the IANA special-purpose registries of both families) and must be public —
 *   or private (RFC 1918, loopback, link-local, CGNAT, ULA) when `allowPrivateNetworks` is set.
 *   Special-purpose addresses (unspecified, broadcast, multicast, documentation, benchmarking,
 *   reserved, 6to4, Teredo, ORCHID, IPv6 outside 2000::/3…) are refused always. IPv4-mapped and
 *   NAT64 (64:ff9b::/96) addresses are judged by the IPv4 address they embed.
 * - **The socket goes to the checked address:** the request runs on its own undici `Agent` whose
 *   `connect.lookup` hands out only the addresses that were checked, so a second DNS answer (a
 *   rebinding resolver) is never asked for. Nothing connects before the checks pass.
 * - **Redirects** are followed by hand (at most 5), each hop checked again from the start;
 *   credentials are not carried to another origin.
 * - **Limits:** a time limit over the whole exchange and a cap on the body read.
 *
 * @since 0.1.0
 */
import { lookup as dnsLookup } from "node:dns/promises"
import { isIP, type LookupFunction } from "node:net"
import { Duration, Effect, Schema } from "effect"
import ipaddr from "ipaddr.js"
import type { Dispatcher } from "undici"

// undici (~1 MB bundled) is loaded on the first request, not with the tools: a daemon whose
// `http.fetch` allowlist is empty (the default) never sends one, and pays neither its start-up
// time nor its memory. Node caches the module, so later requests reuse it.
const undici = () => import("undici")

// =============================================================================
// Errors
// =============================================================================

/**
 * A request refused by policy: nothing was sent for the refused hop.
 *
 * @since 0.1.0
 * @category Errors
 */
export class FetchRefused extends Schema.TaggedError<FetchRefused>("@palyra/core/FetchRefused")("FetchRefused", {
  reason: Schema.Literal(
    "invalid_url",
    "scheme_not_allowed",
    "host_not_allowed",
    "private_address",
    "special_address",
    "header_not_allowed",
    "too_many_redirects"
  ),
  url: Schema.String,
  message: Schema.String
}) {}

/**
 * A permitted request that did not complete: the name did not resolve, the network failed, the
 * time limit passed or the caller aborted.
 *
 * @since 0.1.0
 * @category Errors
 */
export class FetchFailed extends Schema.TaggedError<FetchFailed>("@palyra/core/FetchFailed")("FetchFailed", {
  reason: Schema.Literal("dns", "network", "timeout", "aborted"),
  url: Schema.String,
  message: Schema.String,
  cause: Schema.optional(Schema.Defect)
}) {}

// =============================================================================
// Address classification
// =============================================================================

/**
 * `public`: may be fetched; `private`: only with `allowPrivateNetworks`; `special`: never.
 *
 * @since 0.1.0
 * @category Models
 */
export type AddressKind = "public" | "private" | "special"

/** @since 0.1.0 @category Models */
export interface AddressClass {
  readonly kind: AddressKind
  /** The `ipaddr.js` range name (e.g. `loopback`, `6to4`), prefixed for embedded IPv4. */
  readonly range: string
}

const privateV4 = new Set(["private", "loopback", "linkLocal", "carrierGradeNat"])
const privateV6 = new Set(["loopback", "linkLocal", "uniqueLocal"])
/** IANA's global unicast block: everything else in IPv6 is unassigned or special. */
const globalUnicast = ipaddr.IPv6.parseCIDR("2000::/3")
/** The NAT64 well-known prefix (RFC 6052); the local-use 64:ff9b:1::/48 stays special. */
const nat64 = ipaddr.IPv6.parseCIDR("64:ff9b::/96")

const classifyV4 = (ip: ipaddr.IPv4): AddressClass => {
  const range = ip.range()
  return { kind: range === "unicast" ? "public" : privateV4.has(range) ? "private" : "special", range }
}

const classifyV6 = (ip: ipaddr.IPv6): AddressClass => {
  const range: string = ip.range()
  if (range === "ipv4Mapped") {
    const inner = classifyV4(ip.toIPv4Address())
    return { kind: inner.kind, range: `ipv4Mapped/${inner.range}` }
  }
  if (ip.match(nat64)) {
    const inner = classifyV4(new ipaddr.IPv4(ip.toByteArray().slice(12)))
    // RFC 6052 §3.1: the well-known prefix must not carry non-global IPv4 addresses.
    return { kind: inner.kind === "public" ? "public" : "special", range: `rfc6052/${inner.range}` }
  }
  if (ip.zoneId !== undefined && range !== "linkLocal") return { kind: "special", range: `${range}%zone` }
  if (privateV6.has(range)) return { kind: "private", range }
  if (range === "unicast") {
    return ip.match(globalUnicast) ? { kind: "public", range } : { kind: "special", range: "unassigned" }
  }
  return { kind: "special", range }
}

/**
 * Classify one IP address in standard notation (dotted-quad IPv4 or IPv6, as `node:net` `isIP`
 * accepts it). Anything else is `special` (never connected to).
 *
 * @since 0.1.0
 * @category Utils
 */
export const classifyAddress = (address: string): AddressClass => {
  if (isIP(address) === 0) return { kind: "special", range: "invalid" }
  const ip = ipaddr.parse(address)
  return ip.kind() === "ipv4" ? classifyV4(ip as ipaddr.IPv4) : classifyV6(ip as ipaddr.IPv6)
}

/** True for addresses refused unless private networks are allowed. @since 0.1.0 @category Utils */
export const isPrivateAddress = (address: string): boolean => classifyAddress(address).kind !== "public"

// =============================================================================
// Options and result
// =============================================================================

/**
 * Resolves a host name to IP addresses (standard notation). The default is the system resolver
 * (`dns.lookup`, so `/etc/hosts` applies). Called once per hop.
 *
 * @since 0.1.0
 * @category Models
 */
export type Resolver = (hostname: string) => Promise<ReadonlyArray<string>>

/** @since 0.1.0 @category Models */
export interface FetchOptions {
  /** Hosts that may be fetched: exact names or IP addresses, or `*.example.com` for subdomains. */
  readonly allowHosts: ReadonlyArray<string>
  /** Allow private, loopback, link-local and CGNAT addresses (default false). */
  readonly allowPrivateNetworks?: boolean | undefined
  /** Largest body read; the rest is dropped and `truncated` set (default 512 KiB). */
  readonly maxBytes?: number | undefined
  /** Time limit for the whole exchange, redirects included (default 15 s). */
  readonly timeoutMs?: number | undefined
  readonly signal?: AbortSignal | undefined
  readonly resolver?: Resolver | undefined
  readonly method?: "GET" | "POST" | "HEAD" | undefined
  readonly headers?: Readonly<Record<string, string>> | undefined
  /** Sent with POST only. */
  readonly body?: string | undefined
}

/** @since 0.1.0 @category Models */
export interface FetchResponse {
  /** The URL that answered, after redirects. */
  readonly url: string
  readonly status: number
  /** Header names in lower case; repeated headers joined with `, `. */
  readonly headers: Readonly<Record<string, string>>
  readonly body: Uint8Array
  readonly truncated: boolean
}

// =============================================================================
// Fetch
// =============================================================================

const maxRedirects = 5
/** Headers that would let the caller steer the connection or the framing rather than the request. */
const forbiddenHeaders = new Set([
  "host",
  "connection",
  "keep-alive",
  "proxy-authorization",
  "proxy-connection",
  "transfer-encoding",
  "te",
  "trailer",
  "upgrade",
  "expect",
  "content-length"
])
/** Dropped when a redirect leaves the origin. */
const credentialHeaders = new Set(["authorization", "cookie"])

const systemResolver: Resolver = (hostname) =>
  dnsLookup(hostname, { all: true, order: "verbatim" }).then((list) => list.map((a) => a.address))

const canonicalIp = (address: string) => ipaddr.parse(address).toNormalizedString()
const unbracket = (host: string) => (host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host)

/**
 * Whether `host` (a URL hostname) is on the allowlist: equal names, `*.example.com` for strict
 * subdomains, equal addresses for IP literals.
 *
 * @since 0.1.0
 * @category Utils
 */
export const hostAllowed = (allowHosts: ReadonlyArray<string>, host: string): boolean => {
  const h = unbracket(host.toLowerCase())
  const ip = isIP(h) !== 0 ? canonicalIp(h) : undefined
  return allowHosts.some((pattern) => {
    const p = unbracket(pattern.toLowerCase())
    if (ip !== undefined) return isIP(p) !== 0 && canonicalIp(p) === ip
    return p.startsWith("*.") ? h.endsWith(p.slice(1)) && h.length > p.length - 1 : h === p
  })
}

interface Checked {
  readonly host: string
  readonly addresses: ReadonlyArray<{ readonly address: string; readonly family: 4 | 6 }>
}

/** A `lookup` that answers only for the checked host, only with the checked addresses. */
const pinnedLookup =
  (checked: Checked): LookupFunction =>
  (hostname, options, callback) => {
    const wanted = options.family === "IPv4" ? 4 : options.family === "IPv6" ? 6 : options.family
    const list = checked.addresses.filter((a) => !wanted || a.family === wanted)
    const first = list[0]
    if (hostname.toLowerCase() !== checked.host || first === undefined) {
      const error: NodeJS.ErrnoException = new Error(`no checked address for ${hostname}`)
      error.code = "ENOTFOUND"
      return callback(error, "", 0)
    }
    if (options.all)
      return callback(
        null,
        list.map((a) => ({ address: a.address, family: a.family }))
      )
    return callback(null, first.address, first.family)
  }

const failure = (url: URL, cause: unknown) =>
  new FetchFailed({
    reason: cause instanceof Error && cause.name === "AbortError" ? "aborted" : "network",
    url: url.href,
    message: cause instanceof Error ? cause.message : String(cause),
    cause
  })

const check = Effect.fnUntraced(function* (url: URL, options: FetchOptions) {
  const refuse = (reason: FetchRefused["reason"], message: string) =>
    new FetchRefused({ reason, url: url.href, message })
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    return yield* refuse("scheme_not_allowed", `scheme ${url.protocol} is not allowed`)
  }
  if (url.username !== "" || url.password !== "") {
    return yield* refuse("invalid_url", "credentials in the URL are not allowed")
  }
  const host = unbracket(url.hostname).toLowerCase()
  if (!hostAllowed(options.allowHosts, host)) {
    return yield* refuse("host_not_allowed", `host ${host} is not on the allowlist`)
  }
  const resolver = options.resolver ?? systemResolver
  const resolved =
    isIP(host) !== 0
      ? [host]
      : yield* Effect.tryPromise({
          try: () => resolver(host),
          catch: (cause) =>
            new FetchFailed({
              reason: "dns",
              url: url.href,
              message: `could not resolve ${host}: ${cause instanceof Error ? cause.message : String(cause)}`,
              cause
            })
        })
  if (resolved.length === 0) {
    return yield* new FetchFailed({ reason: "dns", url: url.href, message: `${host} has no addresses` })
  }
  const addresses: Array<Checked["addresses"][number]> = []
  for (const address of resolved) {
    const { kind, range } = classifyAddress(address)
    if (kind === "special") {
      return yield* refuse(
        "special_address",
        `host ${host} resolves to a special-purpose address (${address}: ${range})`
      )
    }
    if (kind === "private" && options.allowPrivateNetworks !== true) {
      return yield* refuse("private_address", `host ${host} resolves to a private address (${address}: ${range})`)
    }
    addresses.push({ address, family: isIP(address) as 4 | 6 })
  }
  return { host, addresses } satisfies Checked
})

interface Hop {
  readonly url: URL
  readonly method: "GET" | "POST" | "HEAD"
  readonly headers: Readonly<Record<string, string>>
  readonly body: string | undefined
}

const flatHeaders = (headers: Record<string, string | Array<string> | undefined>): Record<string, string> => {
  const out: Record<string, string> = {}
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined) out[name.toLowerCase()] = Array.isArray(value) ? value.join(", ") : value
  }
  return out
}

const redirectStatuses = new Set([301, 302, 303, 307, 308])
const redirectTarget = (status: number, headers: Readonly<Record<string, string>>) =>
  redirectStatuses.has(status) ? headers.location : undefined

/** One request to checked addresses, on its own agent, which is destroyed when the hop ends. */
const send = (hop: Hop, checked: Checked, maxBytes: number, timeoutMs: number) =>
  Effect.gen(function* () {
    const { Agent, request } = yield* Effect.promise(undici)
    const agent = yield* Effect.acquireRelease(
      Effect.sync(() => new Agent({ connect: { lookup: pinnedLookup(checked), timeout: timeoutMs } })),
      (agent) => Effect.promise(() => agent.destroy())
    )
    const controller = yield* Effect.acquireRelease(
      Effect.sync(() => new AbortController()),
      (c) => Effect.sync(() => c.abort())
    )
    const response: Dispatcher.ResponseData = yield* Effect.tryPromise({
      try: () =>
        request(hop.url, {
          dispatcher: agent,
          method: hop.method,
          headers: hop.headers,
          ...(hop.body !== undefined && hop.method === "POST" ? { body: hop.body } : {}),
          signal: controller.signal,
          headersTimeout: timeoutMs,
          bodyTimeout: timeoutMs
        }),
      catch: (cause) => failure(hop.url, cause)
    })
    const headers = flatHeaders(response.headers)
    if (redirectTarget(response.statusCode, headers) !== undefined) {
      // a redirect's body is not read: the hop ends here and its agent is destroyed
      return { status: response.statusCode, headers, body: new Uint8Array(0), truncated: false }
    }
    const read = yield* Effect.tryPromise({
      try: async () => {
        const chunks: Array<Uint8Array> = []
        let size = 0
        for await (const chunk of response.body as AsyncIterable<Uint8Array>) {
          if (size + chunk.length > maxBytes) {
            chunks.push(chunk.subarray(0, maxBytes - size))
            return { chunks, truncated: true }
          }
          size += chunk.length
          chunks.push(chunk)
        }
        return { chunks, truncated: false }
      },
      catch: (cause) => failure(hop.url, cause)
    })
    return {
      status: response.statusCode,
      headers,
      body: new Uint8Array(Buffer.concat(read.chunks)),
      truncated: read.truncated
    }
  }).pipe(Effect.scoped)

/** The next hop of a redirect, as the Fetch standard rewrites method, body and headers. */
const redirect = (hop: Hop, status: number, location: string): Hop | undefined => {
  let url: URL
  try {
    url = new URL(location, hop.url)
  } catch {
    return undefined
  }
  const toGet =
    (status === 303 && hop.method !== "HEAD") || ((status === 301 || status === 302) && hop.method === "POST")
  const sameOrigin = url.origin === hop.url.origin
  const headers: Record<string, string> = {}
  for (const [name, value] of Object.entries(hop.headers)) {
    const lower = name.toLowerCase()
    if (!sameOrigin && credentialHeaders.has(lower)) continue
    if (toGet && (lower === "content-type" || lower === "content-encoding" || lower === "content-language")) continue
    headers[name] = value
  }
  return { url, method: toGet ? "GET" : hop.method, headers, body: toGet ? undefined : hop.body }
}

const aborted = (signal: AbortSignal, url: string) =>
  Effect.async<never, FetchFailed>((resume) => {
    const onAbort = () => resume(Effect.fail(new FetchFailed({ reason: "aborted", url, message: "aborted" })))
    if (signal.aborted) return onAbort()
    signal.addEventListener("abort", onAbort, { once: true })
    return Effect.sync(() => signal.removeEventListener("abort", onAbort))
  })

/**
 * Fetch `url` under the guard described in the module docs. Refusals (`FetchRefused`) happen
 * before any connection for that hop; the connection goes only to addresses that were checked.
 *
 * @since 0.1.0
 * @category Fetch
 */
export const safeFetch = (
  url: string | URL,
  options: FetchOptions
): Effect.Effect<FetchResponse, FetchRefused | FetchFailed> => {
  const href = String(url)
  const maxBytes = options.maxBytes ?? 512 * 1024
  const timeoutMs = options.timeoutMs ?? 15_000
  const program = Effect.gen(function* () {
    const first = yield* Effect.try({
      try: () => new URL(url),
      catch: () => new FetchRefused({ reason: "invalid_url", url: href, message: `not a URL: ${href}` })
    })
    const headers = options.headers ?? {}
    const bad = Object.keys(headers).find((name) => forbiddenHeaders.has(name.toLowerCase()))
    if (bad !== undefined) {
      return yield* new FetchRefused({
        reason: "header_not_allowed",
        url: href,
        message: `header ${bad} is not allowed`
      })
    }
    let hop: Hop = { url: first, method: options.method ?? "GET", headers, body: options.body }
    for (let n = 0; n <= maxRedirects; n++) {
      const checked = yield* check(hop.url, options)
      const response = yield* send(hop, checked, maxBytes, timeoutMs)
      const location = redirectTarget(response.status, response.headers)
      if (location === undefined) return { url: hop.url.href, ...response }
      const next = redirect(hop, response.status, location)
      if (next === undefined) {
        return yield* new FetchRefused({
          reason: "invalid_url",
          url: hop.url.href,
          message: `redirect to an invalid URL: ${location}`
        })
      }
      hop = next
    }
    return yield* new FetchRefused({ reason: "too_many_redirects", url: href, message: "too many redirects" })
  }).pipe(
    Effect.timeoutFail({
      duration: Duration.millis(timeoutMs),
      onTimeout: () => new FetchFailed({ reason: "timeout", url: href, message: `timed out after ${timeoutMs} ms` })
    })
  )
  return (options.signal === undefined ? program : Effect.raceFirst(program, aborted(options.signal, href))).pipe(
    Effect.withSpan("NetGuard.safeFetch", { captureStackTrace: false })
  )
}
