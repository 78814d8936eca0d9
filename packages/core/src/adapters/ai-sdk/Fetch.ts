/**
 * A `fetch` for the AI SDK's providers over undici's `request` API and one keep-alive `Agent`.
 *
 * The providers call `fetch(url, { method, headers, body: string, signal })` once per model call and
 * read the body as a web stream. Node's global `fetch` (undici's spec-complete `fetch`) does much
 * more per call than that needs (Request/Headers objects, the fetch controller, its stream
 * plumbing): measured ~250–400 µs of CPU per streamed model call more than `request` (bench/turn,
 * PERF-NOTES round 4). `request` is undici's own fast path — the same library, connection pool and
 * defaults (300 s header and body timeouts) underneath.
 *
 * What differs from `fetch`, on purpose: it asks for an uncompressed answer (`accept-encoding:
 * identity`, and decodes gzip/deflate/br anyway if a server compresses regardless); it follows up to
 * five redirects; any body other than a string or bytes, and any process with a proxy configured in
 * the environment, goes to the global `fetch` instead (`make` returns `undefined` then, and the
 * provider keeps its default).
 *
 * @since 0.1.0
 */
import { pipeline, Readable, type Transform } from "node:stream"
import { createBrotliDecompress, createGunzip, createInflate } from "node:zlib"
import { Agent, type Dispatcher, interceptors, request } from "undici"
import { webBody } from "./internal/webBody.js"

const NULL_BODY = new Set([101, 204, 205, 304])

const PROXY_VARIABLES = ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"]

// A header name already in `Headers`' form (a lower-case token) and a value `Headers` keeps as it is
// (visible ASCII and inner spaces: nothing to trim, nothing to refuse).
const CANONICAL_NAME = /^[a-z0-9!#$%&'*+.^_`|~-]+$/
const CANONICAL_VALUE = /^(?:[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?)?$/

/**
 * A plain record whose names and values `Headers` would keep as they are, copied without a `Headers`
 * object (the providers' usual headers; a few KB allocated per model call less, PERF-NOTES round 16b):
 * the same record, in the same (sorted) order, that `headersOf` builds by iterating a `Headers`, or
 * `undefined` when any entry would change (`set-cookie`, which `Headers` iterates apart, included).
 */
const canonicalRecord = (init: Record<string, string | undefined>): Record<string, string> | undefined => {
  const names: Array<string> = []
  let sorted = true
  for (const name in init) {
    if (!Object.hasOwn(init, name)) continue
    const value = init[name]
    if (value === undefined) continue
    if (typeof value !== "string" || !CANONICAL_NAME.test(name) || !CANONICAL_VALUE.test(value)) return undefined
    if (name === "set-cookie") return undefined
    if (names.length > 0 && name < names[names.length - 1]!) sorted = false
    names.push(name)
  }
  if (!sorted) names.sort()
  const out: Record<string, string> = {}
  for (const name of names) out[name] = init[name]!
  return out
}

const headersOf = (init: RequestInit["headers"]): Record<string, string> => {
  if (init == null) return {}
  if (!(init instanceof Headers) && !Array.isArray(init)) {
    const fast = canonicalRecord(init as Record<string, string | undefined>)
    if (fast !== undefined) return fast
  }
  const out: Record<string, string> = {}
  // A plain record may carry `undefined` for a header the provider leaves out (as `fetch` drops it).
  const entries =
    init instanceof Headers || Array.isArray(init)
      ? init
      : Object.entries(init as Record<string, string | undefined>).filter(
          (e): e is [string, string] => e[1] !== undefined
        )
  // `Headers` lower-cases names and joins repeated ones, as `fetch` does.
  for (const [k, v] of new Headers(entries)) out[k] = v
  return out
}

/** Joined with `pipeline`, so a failure on either side (a connection dropped mid-body) fails the other. */
const through = (body: Readable, decoder: Transform): Readable => pipeline(body, decoder, () => {})

const decoded = (body: Readable, encoding: string | undefined): Readable => {
  switch (encoding?.trim().toLowerCase()) {
    case "gzip":
    case "x-gzip":
      return through(body, createGunzip())
    case "deflate":
      return through(body, createInflate())
    case "br":
      return through(body, createBrotliDecompress())
    default:
      return body
  }
}

/**
 * A `fetch` over undici's `request` with its own keep-alive agent, or `undefined` when the
 * environment configures a proxy (the global `fetch` is the one that honours it).
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = (env: Record<string, string | undefined> = process.env): typeof fetch | undefined => {
  if (PROXY_VARIABLES.some((name) => (env[name] ?? "") !== "")) return undefined
  const dispatcher: Dispatcher = new Agent({ keepAliveTimeout: 4_000 }).compose(
    interceptors.redirect({ maxRedirections: 5 })
  )
  const fast = async (input: string | URL | Request, init: RequestInit = {}): Promise<Response> => {
    const body = init.body
    if (input instanceof Request || (body != null && typeof body !== "string" && !(body instanceof Uint8Array))) {
      return fetch(input, init)
    }
    const headers = headersOf(init.headers)
    headers["accept-encoding"] ??= "identity"
    const answer = await request(input, {
      method: (init.method ?? "GET") as Dispatcher.HttpMethod,
      headers,
      body: body ?? null,
      signal: init.signal ?? null,
      dispatcher
    })
    const responseHeaders = new Headers()
    for (const [k, v] of Object.entries(answer.headers)) {
      if (v === undefined) continue
      if (Array.isArray(v)) for (const one of v) responseHeaders.append(k, one)
      else responseHeaders.set(k, v)
    }
    if (NULL_BODY.has(answer.statusCode)) {
      answer.body.resume()
      return new Response(null, { status: answer.statusCode, headers: responseHeaders })
    }
    const encoding = responseHeaders.get("content-encoding") ?? undefined
    // An uncompressed body (what we ask for) with the chunks of one socket read enqueued together
    // (`webBody`); a decoded one as `Readable.toWeb` gives it (its zlib failures mapped as it maps them).
    const stream =
      encoding === undefined
        ? webBody(answer.body)
        : (Readable.toWeb(decoded(answer.body, encoding)) as ReadableStream<Uint8Array>)
    if (encoding !== undefined) {
      responseHeaders.delete("content-encoding")
      responseHeaders.delete("content-length")
    }
    return new Response(stream, { status: answer.statusCode, headers: responseHeaders })
  }
  return fast as typeof fetch
}
