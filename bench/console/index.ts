/**
 * bench/console: the web console's weight and first load.
 *
 * - `bundleKb`: everything a first visit downloads (index.html, the JS entry and the chunks it imports
 *   statically, the stylesheet, the icon), gzip-compressed as palyrad serves it; `bundleRawKb`
 *   uncompressed; `lazyKb` the optional pages' chunks, fetched when first visited.
 * - `firstLoadMs`: navigation start to the sign-in page being interactive (the app's
 *   `palyra:sign-in-ready` performance mark), median of N cold loads (a fresh browser context each,
 *   so nothing is cached) in Debian's chromium against a real palyrad on 127.0.0.1.
 *
 * Builds the console if it is missing. Without /usr/bin/chromium it says so loudly and reports the
 * bundle size only.
 */
import { spawn, spawnSync } from "node:child_process"
import { existsSync, mkdtempSync, readdirSync, readFileSync } from "node:fs"
import { createRequire } from "node:module"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { gzipSync } from "node:zlib"
import { quick, result, round, table } from "../lib/report.js"

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..")
const dist = join(root, "packages/console/dist")
const CHROMIUM = "/usr/bin/chromium"

if (!existsSync(join(dist, "index.html"))) {
  console.error("building the console first…")
  const built = spawnSync(process.execPath, [join(root, "packages/console/scripts/build.mjs")], { stdio: "inherit" })
  if (built.status !== 0) process.exit(built.status ?? 1)
}

/**
 * What a first visit downloads: index.html, the files it references (icon, stylesheet, entry,
 * preloaded chunks) and the chunks those import statically. The optional pages are dynamic imports
 * (`import("./Pairing-….js")`), fetched when first visited: reported apart as `lazyKb`.
 */
const firstLoad = (): Set<string> => {
  const seen = new Set<string>(["index.html"])
  const queue = [...readFileSync(join(dist, "index.html"), "utf8").matchAll(/"\/(assets\/[^"]+)"/g)].map((m) => m[1]!)
  while (queue.length > 0) {
    const file = queue.pop()!
    if (seen.has(file)) continue
    seen.add(file)
    if (!file.endsWith(".js")) continue
    const code = readFileSync(join(dist, file), "utf8")
    for (const m of code.matchAll(/(?:from|import)\s*"\.\/([^"]+\.js)"/g)) queue.push(`assets/${m[1]!}`)
  }
  return seen
}
const first = firstLoad()
const files = [join(dist, "index.html"), ...readdirSync(join(dist, "assets")).map((f) => join(dist, "assets", f))]
const sizes = files.map((path) => {
  const body = readFileSync(path)
  const file = path.slice(dist.length + 1)
  return {
    file,
    firstLoad: first.has(file),
    rawKb: round(body.length / 1024),
    gzipKb: round(gzipSync(body, { level: 9 }).length / 1024)
  }
})
table(
  "console files",
  sizes.map((s) => ({ ...s, firstLoad: s.firstLoad ? "yes" : "no" }))
)
const sum = (rows: ReadonlyArray<{ gzipKb: number }>) => round(rows.reduce((n, s) => n + s.gzipKb, 0))
const bundleKb = sum(sizes.filter((s) => s.firstLoad))
const lazyKb = sum(sizes.filter((s) => !s.firstLoad))
const bundleRawKb = round(sizes.filter((s) => s.firstLoad).reduce((n, s) => n + s.rawKb, 0))

const startDaemon = (dir: string) =>
  new Promise<{ url: string; stop: () => Promise<void> }>((resolve, reject) => {
    const tsx = join(
      dirname(createRequire(join(root, "packages/daemon/package.json")).resolve("tsx/package.json")),
      "dist/esm/index.mjs"
    )
    const proc = spawn(
      process.execPath,
      [
        "--conditions=@palyra/source",
        "--import",
        tsx,
        join(root, "packages/daemon/src/bin/palyrad-main.ts"),
        "--port",
        "0"
      ],
      {
        cwd: dir,
        stdio: ["ignore", "ignore", "pipe"],
        env: { ...process.env, PALYRA_GRPC_PORT: "0", PALYRA_LOG_FORMAT: "json" }
      }
    )
    let err = ""
    proc.stderr!.on("data", (d) => {
      err += d
      const m = /listening on (http:\/\/\S+)/.exec(err)
      if (m)
        resolve({
          url: m[1]!,
          stop: () =>
            new Promise<void>((r) => {
              proc.on("exit", () => r())
              proc.kill("SIGTERM")
            })
        })
    })
    proc.on("exit", (code) => reject(new Error(`palyrad exited ${code}: ${err}`)))
  })

const main = async () => {
  if (!existsSync(CHROMIUM)) {
    console.error(
      "\n[palyra] bench console: /usr/bin/chromium is missing (apt-get install -y chromium); SKIPPING the first-load measurement.\n"
    )
    result("console", { bundleKb, bundleRawKb, lazyKb })
    return
  }
  const { chromium } = await import("playwright-core")
  const daemon = await startDaemon(mkdtempSync(join(tmpdir(), "palyra-bench-console-")))
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu"] })
  try {
    const loads = quick ? 3 : 15
    const times: Array<number> = []
    for (let i = 0; i < loads + 1; i++) {
      const context = await browser.newContext()
      const page = await context.newPage()
      await page.goto(daemon.url)
      await page.waitForFunction(() => performance.getEntriesByName("palyra:sign-in-ready").length > 0)
      const ms = await page.evaluate(() => performance.getEntriesByName("palyra:sign-in-ready")[0]!.startTime)
      if (i > 0) times.push(ms) // the first load warms the daemon's own code paths
      await context.close()
    }
    const sorted = [...times].sort((a, b) => a - b)
    const firstLoadMs = round(sorted[Math.floor(sorted.length / 2)]!, 1)
    table("first load (navigation start → sign-in interactive)", [
      { loads, medianMs: firstLoadMs, minMs: round(sorted[0]!, 1), maxMs: round(sorted.at(-1)!, 1) }
    ])
    result("console", { bundleKb, firstLoadMs, bundleRawKb, lazyKb })
  } finally {
    await browser.close()
    await daemon.stop()
  }
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
