/**
 * The compile cache palyrad ships (`dist/compile-cache`, written by the build: scripts/compile-cache.ts):
 * a first start with no `NODE_COMPILE_CACHE` reads every chunk it loads to get ready from it (Node's
 * own compile-cache log, `NODE_DEBUG_NATIVE=COMPILE_CACHE`, says which entries V8 accepted — no
 * timing), also from a copy of the bundle elsewhere (the portable form: an install's path is not the
 * build's); and `NODE_COMPILE_CACHE` still wins over it. The bundle is built first when it is missing
 * or older than the daemon's sources or build configuration.
 */
import { spawn } from "node:child_process"
import { cpSync, existsSync, mkdtempSync, readdirSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, beforeAll, expect, it } from "vitest"
import { cleanEnv } from "./support.js"

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..")
const dist = join(pkg, "dist")

const newest = (path: string): number =>
  statSync(path).isDirectory()
    ? readdirSync(path).reduce((latest, name) => Math.max(latest, newest(join(path, name))), 0)
    : statSync(path).mtimeMs

beforeAll(async () => {
  const sources = Math.max(
    newest(join(pkg, "src")),
    newest(join(pkg, "scripts")),
    statSync(join(pkg, "tsup.config.ts")).mtimeMs
  )
  const bin = join(dist, "bin", "palyrad.js")
  if (existsSync(bin) && existsSync(join(dist, "compile-cache")) && statSync(bin).mtimeMs >= sources) return
  await new Promise<void>((resolve, reject) => {
    const child = spawn("npx", ["tsup"], { cwd: pkg, stdio: ["ignore", "ignore", "pipe"] })
    let err = ""
    child.stderr.on("data", (d) => (err += d))
    child.on("exit", (code) => (code === 0 ? resolve() : reject(new Error(`tsup exited ${code}: ${err}`))))
  })
}, 180_000)

const temps: Array<string> = []
afterAll(() => {
  for (const dir of temps) rmSync(dir, { recursive: true, force: true })
})

/** Start `<distDir>/bin/palyrad.js` until it listens; Node's compile-cache log, per ESM chunk. */
const startLogged = (distDir: string, env: Record<string, string | undefined>) =>
  new Promise<{ readonly log: string; readonly chunks: Map<string, string> }>((resolve, reject) => {
    const data = mkdtempSync(join(tmpdir(), "palyrad-cc-test-"))
    temps.push(data)
    const child = spawn(process.execPath, [join(distDir, "bin", "palyrad.js"), "--port", "0"], {
      cwd: data,
      env: { ...cleanEnv(), PALYRA_GRPC_PORT: "0", NODE_DEBUG_NATIVE: "COMPILE_CACHE", ...env },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let log = ""
    const onData = (d: Buffer) => {
      log += d
      if (!/listening on http/.test(log)) return
      child.stdout.off("data", onData)
      child.stderr.off("data", onData)
      child.kill("SIGKILL")
      // "V8 code cache for ESM file:///…/dist/chunk-X.js was accepted" (read from the cache) or
      // "… was not initialized" (compiled here).
      const chunks = new Map<string, string>()
      for (const m of log.matchAll(/V8 code cache for ESM (file:\S+) was (accepted|not initialized|rejected)/g))
        if (m[1]!.startsWith(`file://${distDir}/`)) chunks.set(m[1]!.slice(`file://${distDir}/`.length), m[2]!)
      resolve({ log, chunks })
    }
    child.stdout.on("data", onData)
    child.stderr.on("data", onData)
    child.on("exit", (code) => {
      if (!/listening on http/.test(log)) reject(new Error(`palyrad exited ${code}: ${log.slice(-2000)}`))
    })
  })

const unset = { NODE_COMPILE_CACHE: undefined, NODE_DISABLE_COMPILE_CACHE: undefined }

it("a first start with no NODE_COMPILE_CACHE reads every chunk it loads from the shipped cache", async () => {
  const { log, chunks } = await startLogged(dist, unset)
  expect(log).toContain(`resolved path ${join(dist, "compile-cache")}`)
  expect(chunks.get("bin/palyrad-main.js")).toBe("accepted")
  expect(chunks.size).toBeGreaterThan(10)
  expect([...chunks].filter(([, how]) => how !== "accepted")).toEqual([])
}, 60_000)

it("the shipped cache holds where the package is installed (a copy of dist elsewhere)", async () => {
  // Beside the package, so the copy resolves the same external dependencies (better-sqlite3, Cedar).
  const moved = mkdtempSync(join(pkg, ".moved-dist-"))
  temps.push(moved)
  cpSync(dist, join(moved, "dist"), { recursive: true })
  const { chunks } = await startLogged(join(moved, "dist"), unset)
  expect(chunks.get("bin/palyrad-main.js")).toBe("accepted")
  expect(chunks.size).toBeGreaterThan(10)
  expect([...chunks].filter(([, how]) => how !== "accepted")).toEqual([])
}, 60_000)

it("NODE_COMPILE_CACHE wins over the shipped cache (an empty one: every chunk compiled)", async () => {
  const own = mkdtempSync(join(tmpdir(), "palyrad-cc-own-"))
  temps.push(own)
  const { log, chunks } = await startLogged(dist, { ...unset, NODE_COMPILE_CACHE: own })
  expect(log).toContain(`resolved path ${own}`)
  expect(log).not.toContain(join(dist, "compile-cache"))
  expect(chunks.get("bin/palyrad-main.js")).toBe("not initialized")
  expect([...chunks].filter(([, how]) => how === "accepted")).toEqual([])
}, 60_000)
