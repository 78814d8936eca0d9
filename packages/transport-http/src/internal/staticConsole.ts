/**
 * The web console's static files, served from the HTTP port: `/` is the page (`no-cache`, so a new
 * build is picked up at once) and `/assets/*` its content-hashed files (cached for a year,
 * `immutable`). Every answer carries a strict Content-Security-Policy (no inline script or style,
 * nothing from another origin, no framing, no `<base>`), `nosniff` and `no-referrer`.
 *
 * The files are read once at start-up (a few dozen KB) and kept with their gzip form. When the
 * console is not built, `/` says how to build it and the daemon runs as before.
 *
 * @internal
 */
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { extname, join } from "node:path"
import { gzipSync } from "node:zlib"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"

/** The policy for the console's page and files. @internal */
export const CONTENT_SECURITY_POLICY = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "connect-src 'self'",
  "font-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'"
].join("; ")

const SECURITY_HEADERS = {
  "content-security-policy": CONTENT_SECURITY_POLICY,
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY",
  "cross-origin-opener-policy": "same-origin",
  "cross-origin-resource-policy": "same-origin"
} as const

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".woff2": "font/woff2",
  ".json": "application/json"
}

interface File {
  readonly body: Uint8Array
  /** The gzip form, when smaller: compressed on the first request that accepts it, not at start-up. */
  readonly gzip: () => Uint8Array | undefined
  readonly type: string
  readonly cache: string
}

const file = (path: string, cache: string): File => {
  const body = readFileSync(path)
  const type = TYPES[extname(path)] ?? "application/octet-stream"
  const compressible = !type.startsWith("image/png") && !type.startsWith("font/") && body.length > 512
  let gzip: { readonly bytes: Uint8Array | undefined } | undefined
  const gzipped = () => {
    if (gzip === undefined) {
      const bytes = compressible ? gzipSync(body, { level: 9 }) : undefined
      gzip = { bytes: bytes !== undefined && bytes.length < body.length ? bytes : undefined }
    }
    return gzip.bytes
  }
  return { body, gzip: gzipped, type, cache }
}

/** @internal */
export interface Site {
  /** The console's files by URL path, or why there are none. */
  readonly files: ReadonlyMap<string, File> | { readonly missing: string }
}

/**
 * Read the built console from `dir` (its `index.html` and `assets/`); `undefined` or a folder
 * without `index.html` gives a site that explains how to build it.
 *
 * @internal
 */
export const load = (dir: string | undefined): Site => {
  const index = dir === undefined ? undefined : join(dir, "index.html")
  if (dir === undefined || index === undefined || !existsSync(index)) {
    return {
      files: {
        missing:
          "The Palyra web console is not built. Build it with `pnpm --filter @palyra/console build` " +
          "(or `npm run build` at the repository root) and restart palyrad. The API is unaffected."
      }
    }
  }
  const files = new Map<string, File>([["/", file(index, "no-cache")]])
  const assets = join(dir, "assets")
  if (existsSync(assets)) {
    for (const name of readdirSync(assets)) {
      files.set(`/assets/${name}`, file(join(assets, name), "public, max-age=31536000, immutable"))
    }
  }
  return { files }
}

/** Whether the console answers this path (the API keeps every other one). @internal */
export const handles = (path: string): boolean => path === "/" || path.startsWith("/assets/")

/** The answer for a console path (`GET`/`HEAD` only). @internal */
export const respond = (
  site: Site,
  method: string,
  path: string,
  acceptEncoding: string | undefined
): HttpServerResponse.HttpServerResponse => {
  const text = (status: number, body: string, extra: Record<string, string> = {}) =>
    HttpServerResponse.text(body, {
      status,
      headers: { ...SECURITY_HEADERS, "cache-control": "no-store", ...extra }
    })
  if (method !== "GET" && method !== "HEAD") return text(405, "method not allowed", { allow: "GET, HEAD" })
  const files = site.files
  if (!(files instanceof Map)) return text(path === "/" ? 503 : 404, "missing" in files ? files.missing : "")
  const found = files.get(path)
  if (found === undefined) return text(404, "no such file")
  const gzipped = /\bgzip\b/.test(acceptEncoding ?? "") ? found.gzip() : undefined
  const gzip = gzipped !== undefined
  const body = gzipped ?? found.body
  return HttpServerResponse.uint8Array(method === "HEAD" ? new Uint8Array(0) : body, {
    status: 200,
    contentType: found.type,
    headers: {
      ...SECURITY_HEADERS,
      "cache-control": found.cache,
      vary: "accept-encoding",
      ...(gzip ? { "content-encoding": "gzip" } : {}),
      ...(method === "HEAD" ? { "content-length": String(body.length) } : {})
    }
  })
}
