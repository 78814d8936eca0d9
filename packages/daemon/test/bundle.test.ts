/**
 * The built palyrad as a launcher runs it: every chunk of the bundle is ASCII (else V8 keeps that
 * chunk's whole source as a two-byte string, twice its size, for the life of the process), and the
 * bin's shebang is `env -S node` and node's flags only — what every package manager's bin shim runs
 * (pnpm's takes the first word after `-S` as the program: an environment assignment there made the
 * installed `palyrad` exit 127). The bundle is built first when it is missing or older
 * than the daemon's sources or build configuration.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs"
import { createRequire } from "node:module"
import { tmpdir } from "node:os"
import { delimiter, dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, beforeAll, expect, it } from "vitest"
import { cleanEnv } from "./support.js"

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..")
const dist = join(pkg, "dist")
const bin = join(dist, "bin", "palyrad.js")

const newest = (path: string): number =>
  statSync(path).isDirectory()
    ? readdirSync(path).reduce((latest, name) => Math.max(latest, newest(join(path, name))), 0)
    : statSync(path).mtimeMs

const run = (command: string, args: ReadonlyArray<string>) =>
  new Promise<void>((resolve, reject) => {
    const child = spawn(command, args, { cwd: pkg, stdio: ["ignore", "ignore", "pipe"] })
    let err = ""
    child.stderr.on("data", (d) => (err += d))
    child.on("error", reject)
    child.on("exit", (code) => (code === 0 ? resolve() : reject(new Error(`${command} exited ${code}: ${err}`))))
  })

beforeAll(async () => {
  const sources = Math.max(newest(join(pkg, "src")), statSync(join(pkg, "tsup.config.ts")).mtimeMs)
  if (!existsSync(bin) || statSync(bin).mtimeMs < sources) await run("npx", ["tsup"])
}, 120_000)

const chunks = (dir: string): Array<string> =>
  readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? chunks(join(dir, e.name)) : e.name.endsWith(".js") ? [join(dir, e.name)] : []
  )

it("every chunk of the bundle is ASCII", () => {
  const files = chunks(dist)
  expect(files.length).toBeGreaterThan(10)
  const nonAscii = files.filter((f) => readFileSync(f).some((byte) => byte >= 0x80))
  expect(nonAscii).toEqual([])
})

it("ws' and mime's CommonJS bodies run only from their lazy shims' first use (tsup's lazyShims), never at import", () => {
  // esbuild wraps a bundled CommonJS module in a function (`require_ws`, `require_mime`) whose body
  // runs on its first call: every call site is where the package gets evaluated. Without the plugin,
  // platform-node's top-level `import * as WS from "ws"` (through ws' wrapper.mjs, which calls
  // `require_websocket` etc. at its top level) and `import Mime from "mime"` call them when their
  // chunk loads.
  const calls = chunks(dist).flatMap((f) =>
    readFileSync(f, "utf8")
      .split("\n")
      .filter((line) => /\brequire_(ws|mime)\(\)/.test(line) || /^\S.*\brequire_websocket(_server)?\(\)/.test(line))
      .filter((line) => !/^\s*var require_/.test(line))
      .map((line) => line.trim())
  )
  expect(calls).toHaveLength(2)
  expect(calls.map((line) => /^loaded\d* \?\?= require_(ws|mime)\(\);$/.exec(line)?.[1]).sort()).toEqual(["mime", "ws"])
})

it("cedar-wasm, required on first use (createRequire from the chunk), resolves from the chunks that require it", () => {
  const users = chunks(dist).filter((f) => readFileSync(f, "utf8").includes('"@cedar-policy/cedar-wasm/nodejs"'))
  expect(users.length).toBeGreaterThan(0)
  for (const f of users) {
    expect(readFileSync(f, "utf8")).toMatch(/createRequire\(import\.meta\.url\)/)
    expect(createRequire(f).resolve("@cedar-policy/cedar-wasm/nodejs")).toMatch(
      /cedar-wasm[\\/]nodejs[\\/]cedar_wasm\.js$/
    )
  }
})

let daemon: ChildProcess | undefined
afterAll(() => {
  if (daemon?.exitCode === null) daemon.kill("SIGKILL")
})

// The shims stand in for whole packages: a platform-node that starts using another member of `ws`
// or `mime` (a static, `WS.Server`, a named import) would get `undefined` on that path only — and
// esbuild does not warn for an importer inside node_modules. So what it uses is audited here.
it("the ws and mime shims provide every member @effect/platform-node uses of them", () => {
  const root = dirname(createRequire(join(pkg, "package.json")).resolve("@effect/platform-node/package.json"))
  const files = (dir: string): Array<string> =>
    readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
      e.isDirectory() ? files(join(dir, e.name)) : e.name.endsWith(".js") ? [join(dir, e.name)] : []
    )
  const shims: Record<string, ReadonlyArray<string>> = {
    ws: ["WebSocket", "WebSocketServer"],
    mime: ["getExtension", "getType"]
  }
  const used: Record<string, Set<string>> = { ws: new Set(), mime: new Set() }
  for (const file of files(join(root, "dist", "esm"))) {
    const text = readFileSync(file, "utf8")
    for (const [statement, , binding, name] of text.matchAll(/import\s+(\*\s+as\s+)?(\w+)\s+from\s+"(ws|mime)"/g)) {
      const rest = text.replace(statement, "")
      for (const [, member] of rest.matchAll(new RegExp(`\\b${binding}\\.(\\w+)`, "g"))) used[name!]!.add(member!)
      // The binding is only ever read through a member (never passed on, compared or `instanceof`'d).
      expect(rest.match(new RegExp(`\\b${binding}\\b(?!\\.)`, "g")), `${file}: ${binding}`).toBeNull()
    }
    expect(text, file).not.toMatch(/import\s*\{[^}]*\}\s*from\s+"(ws|mime)"|require\("(ws|mime)"\)/)
  }
  expect(used.ws!.size + used.mime!.size).toBeGreaterThan(0)
  for (const name of ["ws", "mime"]) for (const member of used[name]!) expect(shims[name]).toContain(member)
})

it("the shebang is node and its flags only (what package managers' bin shims run)", () => {
  const first = readFileSync(bin, "utf8").split("\n", 1)[0]
  expect(first).toMatch(/^#!\/usr\/bin\/env -S node(?: --[a-z-]+(?:=\S+)?)*$/)
})

it.runIf(process.platform === "linux")(
  "run through its shebang, palyrad starts with the shebang's node flags",
  async () => {
    const dir = mkdtempSync(join(tmpdir(), "palyra-bundle-"))
    const proc = spawn(bin, ["--port", "0"], {
      cwd: dir,
      // This Node first on PATH: the shebang runs `node` (better-sqlite3 13 needs Node ≥ 22).
      env: {
        ...cleanEnv(),
        PALYRA_GRPC_PORT: "0",
        PATH: `${dirname(process.execPath)}${delimiter}${process.env.PATH}`
      },
      stdio: ["ignore", "ignore", "pipe"]
    })
    daemon = proc
    try {
      let err = ""
      await new Promise<void>((resolve, reject) => {
        proc.stderr!.on("data", (d) => {
          err += d
          if (/listening on http:\/\//.test(err)) resolve()
        })
        proc.on("exit", (code) => reject(new Error(`palyrad exited ${code}: ${err}`)))
      })
      // `env -S` execs node in the same process: its command line is the daemon's.
      expect(readFileSync(`/proc/${proc.pid}/cmdline`, "utf8").split("\0")).toContain("--max-semi-space-size=4")
      const exited = new Promise((r) => proc.on("exit", r))
      proc.kill("SIGTERM")
      await exited
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  },
  60_000
)
