/**
 * The published packages as a user gets them: each publishable package is packed with `pnpm pack`
 * (as `pnpm publish` would), the tarballs are installed into a fresh project with plain
 * `npm install` (third-party dependencies from the registry, preferring npm's cache), and there:
 *
 * - the embedding example's logic runs as plain JavaScript (Promise API, SQLite journal: the native
 *   addon loads);
 * - `tsc --noEmit` checks a small TypeScript file against the published types (every entry point;
 *   `@ts-expect-error` lines prove the types are real, not `any`);
 * - the `palyrad` bin starts on a free port, the `palyra` bin talks to it, and SIGTERM stops it.
 *
 * That proves `files`, `exports`, `bin`, dependencies and peer dependencies. Packages are built
 * first when their `dist` is missing or older than their sources (turbo builds them in CI).
 */
import { spawn } from "node:child_process"
import { existsSync, mkdirSync, readdirSync, statSync, writeFileSync } from "node:fs"
import { rm } from "node:fs/promises"
import { createRequire } from "node:module"
import { tmpdir } from "node:os"
import { delimiter, dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, expect, it } from "vitest"

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..")
/** Publishable packages, dependencies first. */
const packages = [
  "core",
  "journal",
  "transport-http",
  "transport-grpc",
  "channels",
  "plugins",
  "console",
  "daemon"
] as const
/** Node ≥ 22 (better-sqlite3 13) for every process, including the bins' `#!/usr/bin/env node`. */
const env: Record<string, string | undefined> = {
  ...process.env,
  PATH: `${dirname(process.execPath)}${delimiter}${process.env.PATH ?? ""}`
}
for (const key of Object.keys(env)) if (key.startsWith("PALYRA_") || key.startsWith("npm_")) delete env[key]

/** Run a program to completion (asynchronously: vitest's worker must stay responsive); its stdout. */
const run = (command: string, args: ReadonlyArray<string>, cwd: string, extraEnv: Record<string, string> = {}) =>
  new Promise<string>((resolve, reject) => {
    const child = spawn(command, args, { cwd, env: { ...env, ...extraEnv }, stdio: ["ignore", "pipe", "pipe"] })
    let out = ""
    let err = ""
    child.stdout.on("data", (d) => (out += d))
    child.stderr.on("data", (d) => (err += d))
    child.on("error", reject)
    child.on("exit", (code) =>
      code === 0
        ? resolve(out)
        : reject(new Error(`${command} ${args.join(" ")} (in ${cwd}) exited ${code}:\n${out}\n${err}`))
    )
  })

const newest = (dir: string): number =>
  readdirSync(dir, { withFileTypes: true }).reduce((latest, entry) => {
    const path = join(dir, entry.name)
    return Math.max(latest, entry.isDirectory() ? newest(path) : statSync(path).mtimeMs)
  }, 0)

const ensureBuilt = async (name: string) => {
  const dir = join(root, "packages", name)
  // The console is static files (its entry is a page, not a module).
  const built = join(dir, "dist", name === "console" ? "index.html" : "index.js")
  if (existsSync(built) && statSync(built).mtimeMs >= newest(join(dir, "src"))) return
  await run("pnpm", ["run", "build"], dir)
}

const work = join(tmpdir(), `palyra-pack-${process.pid}`)
afterAll(() => rm(work, { recursive: true, force: true }), 60_000)

const embed = `
import { createPalyra, defineTool, scriptedModel } from "@palyra/core"
import { sqliteJournal } from "@palyra/journal"

const files = new Map([["notes.txt", "buy milk"]])
const lines = []
const palyra = createPalyra({
  journal: sqliteJournal({ filename: "embed.db" }),
  model: scriptedModel([
    { toolCalls: [{ name: "files.read", args: { name: "notes.txt" } }] },
    { toolCalls: [{ name: "files.delete", args: { name: "notes.txt" } }] },
    { text: ["Your note says ", '"buy milk". ', "I did not delete it."] }
  ]),
  tools: [
    defineTool({
      name: "files.read",
      description: "Read a file",
      parameters: { type: "object", properties: { name: { type: "string" } }, required: ["name"] },
      risk: "low",
      execute: async ({ name }) => files.get(name) ?? "no file " + name
    }),
    defineTool({
      name: "files.delete",
      description: "Delete a file",
      parameters: { type: "object", properties: { name: { type: "string" } }, required: ["name"] },
      risk: "sensitive",
      execute: async ({ name }) => files.delete(name)
    })
  ],
  onApproval: (approval) => (approval.tool === "files.delete" ? "deny" : "approve")
})
try {
  const { runId, events } = await palyra.startRun("What does my note say? Then clean up.")
  for await (const event of events) {
    if (event._tag === "ToolResult") lines.push("tool " + event.tool + ": " + event.status)
  }
  const run = await palyra.getRun(runId)
  process.stdout.write(JSON.stringify({ state: run.state, notesLeft: [...files.keys()], lines }))
} finally {
  await palyra.close()
}
`

const typed = `
import { createPalyra, defineTool, scriptedModel, type RunResult } from "@palyra/core"
import { CedarPolicy } from "@palyra/core/cedar"
import { Models } from "@palyra/core/models"
import { BuiltinTools } from "@palyra/core/tools"
import { sqliteJournal, SqliteJournal } from "@palyra/journal"
import { Api, Sse } from "@palyra/transport-http"
import { GrpcTransport } from "@palyra/transport-grpc"
import { ChannelConfig } from "@palyra/channels"
import { Plugins } from "@palyra/plugins"
import { Cli, Config, Doctor, Init } from "@palyra/daemon"

const palyra = createPalyra({ model: scriptedModel([{ text: "hi" }]), journal: sqliteJournal({ filename: ":memory:" }) })
export const started: Promise<{ readonly runId: string }> = palyra.startRun("hello")
// @ts-expect-error startRun takes text, not a number
palyra.startRun(42)
export const tool = defineTool({
  name: "t",
  description: "d",
  parameters: { type: "object", properties: {} },
  risk: "low",
  execute: async () => "ok"
})
export const result: RunResult | undefined = undefined
export const policies: string = CedarPolicy.defaultPolicies
// @ts-expect-error defaultPolicies is a string
export const notNumber: number = CedarPolicy.defaultPolicies
export const pieces = [Models.fromSpec, BuiltinTools.all, SqliteJournal.layer, Api.Api, Sse.parse, GrpcTransport.serve, ChannelConfig.Entries, Plugins.toolName]
export const answers: Init.Answers = { model: "demo:scripted", keyEnv: undefined, workspace: "w", httpPort: 1, grpcPort: 2 }
export const checks: Promise<number> = Cli.main(["doctor"], {}, { out: () => {}, err: () => {}, ask: async () => "", interactive: false })
export const check: Doctor.Check = { name: "n", status: "ok", detail: "d" }
export const load = Config.load
`

it("packed tarballs install with npm into a fresh project: the embedding example runs, types check, the bins work", async () => {
  for (const name of packages) await ensureBuilt(name)
  const tarballs = join(work, "tarballs")
  const project = join(work, "project")
  mkdirSync(tarballs, { recursive: true })
  mkdirSync(project, { recursive: true })
  const packed: Array<string> = []
  for (const name of packages) {
    const out = await run("pnpm", ["pack", "--pack-destination", tarballs], join(root, "packages", name))
    const file = out.trim().split("\n").at(-1)!.trim()
    expect(file).toMatch(/\.tgz$/)
    packed.push(file)
  }
  // Only what users need ships: dist (and the protos), never sources or tests.
  for (const file of packed) {
    const listing = (await run("tar", ["-tzf", file], work)).trim().split("\n")
    expect(listing.filter((p) => !/^package\/(dist\/|proto\/|package\.json$|README|LICENSE)/.test(p))).toEqual([])
  }

  writeFileSync(
    join(project, "package.json"),
    JSON.stringify({ name: "palyra-pack-test", private: true, type: "module" }, null, 2)
  )
  const typescript = createRequire(import.meta.url).resolve("typescript/package.json")
  const typesNode = JSON.parse(
    await run(process.execPath, ["-p", "JSON.stringify(require('@types/node/package.json').version)"], root)
  ) as string
  await run(
    "npm",
    [
      "install",
      "--prefer-offline",
      "--no-audit",
      "--no-fund",
      "--loglevel=error",
      ...packed,
      `@types/node@${typesNode}`
    ],
    project
  )

  // 1. The embedding example, as plain JavaScript, on the SQLite journal.
  writeFileSync(join(project, "embed.mjs"), embed)
  const embedded = JSON.parse(await run(process.execPath, ["embed.mjs"], project))
  expect(embedded).toEqual({
    state: "Done",
    notesLeft: ["notes.txt"],
    lines: ["tool files.read: ok", "tool files.delete: denied"]
  })

  // 2. The published types, with the settings a strict NodeNext project uses.
  writeFileSync(join(project, "typed.ts"), typed)
  writeFileSync(
    join(project, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: {
        target: "ES2022",
        module: "NodeNext",
        moduleResolution: "NodeNext",
        strict: true,
        exactOptionalPropertyTypes: true,
        noEmit: true,
        skipLibCheck: true,
        types: ["node"]
      },
      files: ["typed.ts"]
    })
  )
  await run(process.execPath, [join(dirname(typescript), "bin", "tsc"), "-p", "tsconfig.json"], project)

  // 3. The bins: palyrad starts (demo model, free ports), palyra talks to it, SIGTERM stops it.
  const daemon = spawn(join(project, "node_modules", ".bin", "palyrad"), ["--port", "0"], {
    cwd: project,
    env: { ...env, PALYRA_GRPC_PORT: "0", PALYRA_LOG_FORMAT: "json" },
    stdio: ["ignore", "ignore", "pipe"]
  })
  const exited = new Promise<number | null>((resolve) => daemon.on("exit", resolve))
  try {
    const url = await new Promise<string>((resolve, reject) => {
      let err = ""
      daemon.stderr.on("data", (d) => {
        err += d
        const m = /listening on (http:\/\/\S+)/.exec(err)
        if (m) resolve(m[1]!)
      })
      daemon.on("exit", (code) => reject(new Error(`palyrad exited ${code}: ${err}`)))
    })
    const palyra = join(project, "node_modules", ".bin", "palyra")
    expect(await run(palyra, ["chat", "what time is it", "--url", url], project)).toMatch(/time\.now returned/)
    const status = await run(palyra, ["status", "--json"], project, { PALYRA_URL: url })
    expect(JSON.parse(status)).toMatchObject({ ready: true, sessions: 1 })
    // The installed palyrad finds the installed console's assets and serves them with their CSP.
    const page = await fetch(`${url.replace(/\/$/, "")}/`)
    expect(page.status).toBe(200)
    expect(page.headers.get("content-security-policy")).toContain("default-src 'self'")
    expect(await page.text()).toMatch(/<script[^>]+src="[^"]*\.js"/)
  } finally {
    daemon.kill("SIGTERM")
  }
  expect(await exited).toBe(0)
}, 900_000)
