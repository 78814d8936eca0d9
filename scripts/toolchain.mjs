#!/usr/bin/env node
// Toolchain bootstrap behind `npm start` and `npm test`.
//
// Why it exists: Palyra needs Node >= 22 (AI SDK 7, vitest 3, better-sqlite3 13, connect-node 2),
// but the machines we develop and run CI on ship Node 20 and reach only the npm registry. Node
// itself is published there as a plain package (`node-<platform>-<arch>`), and so is pnpm. When the
// Node on PATH is too old, this script installs Node 24 and pnpm 10 into `.toolchain/` (git-ignored)
// and re-runs itself under them. With Node >= 22 and a pnpm 10 on PATH it just uses those.
//
// Written for Node >= 18 with no dependencies, on purpose.
import { spawnSync } from "node:child_process"
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { delimiter, dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const NODE_VERSION = "24.21.0"
const PNPM_VERSION = "10.34.8"
const root = dirname(dirname(fileURLToPath(import.meta.url)))
const toolchain = join(root, ".toolchain")
const toolBin = join(toolchain, "node_modules", ".bin")
const nodePkg = `node-${process.platform}-${process.arch === "x64" ? "x64" : process.arch}`
const task = process.argv[2]

const log = (msg) => process.stderr.write(`[palyra] ${msg}\n`)
const run = (cmd, args, env = process.env) => spawnSync(cmd, args, { stdio: "inherit", env, cwd: root }).status ?? 1
const installedVersion = (pkg) => {
  try {
    return JSON.parse(readFileSync(join(toolchain, "node_modules", pkg, "package.json"), "utf8")).version
  } catch {
    return undefined
  }
}
const ensureToolchain = (pkgs) => {
  const missing = pkgs.filter(([name, version]) => installedVersion(name) !== version)
  if (missing.length === 0) return
  log(`installing ${missing.map(([n, v]) => `${n}@${v}`).join(", ")} into .toolchain/ (from the npm registry)`)
  mkdirSync(toolchain, { recursive: true })
  if (!existsSync(join(toolchain, "package.json"))) writeFileSync(join(toolchain, "package.json"), '{"private":true}\n')
  const args = ["install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix", toolchain]
  const status = run("npm", [...args, ...missing.map(([n, v]) => `${n}@${v}`)])
  if (status !== 0) {
    log("toolchain install failed; see npm's output above")
    process.exit(status)
  }
}
const withToolBin = () => ({ ...process.env, PATH: `${toolBin}${delimiter}${process.env.PATH ?? ""}` })

if (task !== "test" && task !== "start" && task !== "palyra") {
  log("usage: node scripts/toolchain.mjs <test|start|palyra> [args…]")
  process.exit(2)
}

const major = Number(process.versions.node.split(".")[0])
if (major < 22) {
  if (process.env.PALYRA_TOOLCHAIN_REEXEC) {
    log(`re-run still found Node ${process.version}; giving up`)
    process.exit(1)
  }
  log(`Node ${process.version} is older than 22: using Node ${NODE_VERSION} from .toolchain/`)
  ensureToolchain([
    [nodePkg, NODE_VERSION],
    ["pnpm", PNPM_VERSION]
  ])
  const node = join(toolchain, "node_modules", nodePkg, "bin", "node")
  const env = { ...withToolBin(), PALYRA_TOOLCHAIN_REEXEC: "1" }
  process.exit(run(node, [fileURLToPath(import.meta.url), ...process.argv.slice(2)], env))
}

// Node is recent enough. Use a pnpm 10 from PATH, else the one in .toolchain/.
const pnpmOnPath = spawnSync("pnpm", ["--version"], { encoding: "utf8" })
const usePathPnpm = pnpmOnPath.status === 0 && pnpmOnPath.stdout.trim().startsWith("10.")
if (!usePathPnpm) ensureToolchain([["pnpm", PNPM_VERSION]])
const env = usePathPnpm ? process.env : withToolBin()
const pnpm = (...args) => run("pnpm", args, env)

const cli = join(root, "packages/daemon/dist/bin/palyra.js")
if (task === "palyra" && existsSync(cli)) {
  // The CLI is already built: run it straight away (no install or build on every command).
  process.exit(run(process.execPath, [cli, ...process.argv.slice(3)], env))
}

const ci = process.env.CI === "true" || process.env.CI === "1"
const installStatus = pnpm("install", ci ? "--frozen-lockfile" : "--prefer-offline", "--reporter=append-only")
if (installStatus !== 0) process.exit(installStatus)

if (task === "test") {
  run(process.execPath, [join(root, "scripts", "system-deps.mjs")])
  process.exit(pnpm("run", "verify"))
}
// start / palyra: build what changed (turbo caches), then run palyrad or the CLI with the extra arguments.
const buildStatus = pnpm("run", "build", "--output-logs=errors-only")
if (buildStatus !== 0) process.exit(buildStatus)
const bin = join(root, "packages/daemon/dist/bin", task === "start" ? "palyrad.js" : "palyra.js")
// The node flags the bin's shebang asks for (`#!/usr/bin/env -S node --flag …`).
const flags =
  /^#!.*\bnode((?:\s+--\S+)*)/.exec(readFileSync(bin, "utf8").split("\n", 1)[0])?.[1]?.trim().split(/\s+/) ?? []
// And the environment palyrad runs with (README, "Running palyrad as a service"): glibc's malloc
// limited to two arenas, unless the caller set it.
const daemonEnv = task === "start" ? { MALLOC_ARENA_MAX: env.MALLOC_ARENA_MAX ?? "2" } : {}
process.exit(run(process.execPath, [...flags.filter(Boolean), bin, ...process.argv.slice(3)], { ...env, ...daemonEnv }))
