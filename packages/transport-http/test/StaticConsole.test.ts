/**
 * The web console's static files from the API port: the page with a strict CSP and no-cache, hashed
 * assets cached for a year (gzip when asked), the API untouched, and a page that says how to build
 * the console when it is missing.
 */
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { gunzipSync } from "node:zlib"
import { ScriptedModel } from "@palyra/core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ALICE, raw, startServer, type TestServer } from "./fixtures.js"

const model = ScriptedModel.make(() => ({ text: "hi" }))
const dir = mkdtempSync(join(tmpdir(), "palyra-console-"))
const script = `console.log(${JSON.stringify("x".repeat(2000))})`
mkdirSync(join(dir, "assets"))
writeFileSync(join(dir, "index.html"), '<!doctype html><script type="module" src="/assets/main-ABC123.js"></script>')
writeFileSync(join(dir, "assets", "main-ABC123.js"), script)

let built: TestServer
let missing: TestServer
beforeAll(async () => {
  built = await startServer({ model, serve: { console: { dir } } })
  missing = await startServer({ model, serve: { console: { dir: join(dir, "nowhere") } } })
})
afterAll(async () => {
  await built.close()
  await missing.close()
})

describe("the console's static files", () => {
  it("serves the page with a strict CSP, no-cache and the security headers", async () => {
    const page = await fetch(`${built.base}/`)
    expect(page.status).toBe(200)
    expect(page.headers.get("content-type")).toBe("text/html; charset=utf-8")
    expect(page.headers.get("cache-control")).toBe("no-cache")
    const csp = page.headers.get("content-security-policy") ?? ""
    expect(csp).toContain("default-src 'self'")
    expect(csp).toContain("script-src 'self'")
    expect(csp).toContain("style-src 'self'")
    expect(csp).toContain("frame-ancestors 'none'")
    expect(csp).toContain("base-uri 'none'")
    expect(csp).not.toContain("unsafe-inline")
    expect(page.headers.get("x-content-type-options")).toBe("nosniff")
    expect(page.headers.get("referrer-policy")).toBe("no-referrer")
    expect(await page.text()).toContain("/assets/main-ABC123.js")
  })

  it("serves hashed assets immutable for a year, gzipped when the client accepts it", async () => {
    const plain = await raw(built.port, "GET", "/assets/main-ABC123.js")
    expect(plain.status).toBe(200)
    expect(plain.headers["content-type"]).toBe("text/javascript; charset=utf-8")
    expect(plain.headers["cache-control"]).toBe("public, max-age=31536000, immutable")
    expect(plain.headers["content-encoding"]).toBeUndefined()
    expect(plain.body).toBe(script)
    const zipped = await new Promise<Buffer>((resolve, reject) => {
      import("node:http").then(({ get }) =>
        get(
          {
            host: "127.0.0.1",
            port: built.port,
            path: "/assets/main-ABC123.js",
            headers: { "accept-encoding": "gzip" }
          },
          (response) => {
            expect(response.headers["content-encoding"]).toBe("gzip")
            const chunks: Array<Buffer> = []
            response.on("data", (c: Buffer) => chunks.push(c))
            response.on("end", () => resolve(Buffer.concat(chunks)))
          }
        ).on("error", reject)
      )
    })
    expect(zipped.length).toBeLessThan(script.length)
    expect(gunzipSync(zipped).toString()).toBe(script)
    expect((await raw(built.port, "GET", "/assets/other.js")).status).toBe(404)
    expect((await raw(built.port, "GET", "/assets/../index.html")).status).toBe(404)
    expect((await raw(built.port, "POST", "/")).status).toBe(405)
    const head = await raw(built.port, "HEAD", "/")
    expect(head.status).toBe(200)
    expect(head.body).toBe("")
  })

  it("leaves the API, health and OpenAPI routes as they were", async () => {
    expect((await fetch(`${built.base}/healthz`)).status).toBe(200)
    expect((await fetch(`${built.base}/v1/sessions`, { headers: ALICE })).status).toBe(200)
    expect((await fetch(`${built.base}/v1/sessions`)).status).toBe(401)
    expect((await fetch(`${built.base}/openapi.json`, { headers: ALICE })).status).toBe(200)
  })

  it("says how to build the console when it is missing, and the API still works", async () => {
    const page = await fetch(`${missing.base}/`)
    expect(page.status).toBe(503)
    expect(await page.text()).toContain("pnpm --filter @palyra/console build")
    expect((await fetch(`${missing.base}/v1/sessions`, { headers: ALICE })).status).toBe(200)
  })
})
