/**
 * Test support: the real palyrad and palyra processes from the TypeScript sources (tsx), a
 * pseudo-terminal for interactive runs (util-linux `script`), and temp dirs.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { mkdtempSync, readFileSync } from "node:fs"
import { createRequire } from "node:module"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { stripVTControlCharacters } from "node:util"

const here = dirname(fileURLToPath(import.meta.url))
const tsx = join(dirname(createRequire(import.meta.url).resolve("tsx/package.json")), "dist/esm/index.mjs")
export const bin = (name: "palyrad" | "palyra") =>
  join(here, "..", "src", "bin", `${name === "palyrad" ? "palyrad-main" : name}.ts`)
export const nodeArgs = ["--conditions=@palyra/source", "--import", tsx]

export const fresh = (prefix = "palyra-cli-") => mkdtempSync(join(tmpdir(), prefix))

/** The environment without anything that would point palyrad or palyra elsewhere. */
export const cleanEnv = (): Record<string, string> => {
  const env: Record<string, string> = {}
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith("PALYRA_")) env[k] = v
  return env
}

export interface Daemon {
  readonly url: string
  readonly grpcUrl: string
  readonly token: string
  readonly proc: ChildProcess
  readonly exited: Promise<number | null>
}

const running: Array<Daemon> = []
/** Kill every daemon started by this file (call from `afterEach`/`afterAll`). */
export const stopDaemons = () => {
  for (const d of running.splice(0)) if (d.proc.exitCode === null) d.proc.kill("SIGKILL")
}

export const startDaemon = (dir: string, args: ReadonlyArray<string> = [], env: Record<string, string> = {}) =>
  new Promise<Daemon>((resolve, reject) => {
    const proc = spawn(process.execPath, [...nodeArgs, bin("palyrad"), ...args], {
      cwd: dir,
      env: { ...cleanEnv(), PALYRA_LOG_FORMAT: "json", ...env },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let err = ""
    const exited = new Promise<number | null>((r) => proc.on("exit", (code) => r(code)))
    proc.stdout!.on("data", () => {})
    proc.stderr!.on("data", (d) => {
      err += d
      const m = /listening on (http:\/\/[^\s]+)/.exec(err)
      const g = /Connect \(HTTP\/2\): (http:\/\/[^\s]+)/.exec(err)
      if (m && g) {
        const token = readFileSync(join(dir, ".palyra", "admin.token"), "utf8").trim()
        const daemon = { url: m[1]!, grpcUrl: g[1]!, token, proc, exited }
        running.push(daemon)
        resolve(daemon)
      }
    })
    proc.on("exit", (code) => {
      if (!/listening on/.test(err)) reject(new Error(`palyrad exited ${code}: ${err}`))
    })
  })

export interface Ran {
  readonly code: number | null
  readonly out: string
  readonly err: string
}

/** Run the real CLI (stdin closed unless `input` is given, which is written when `when` shows up on stdout). */
export const runCli = (
  dir: string,
  args: ReadonlyArray<string>,
  options: { readonly env?: Record<string, string>; readonly input?: string; readonly when?: RegExp } = {}
) =>
  new Promise<Ran>((resolve) => {
    const proc = spawn(process.execPath, [...nodeArgs, bin("palyra"), ...args], {
      cwd: dir,
      env: { ...cleanEnv(), ...options.env },
      stdio: ["pipe", "pipe", "pipe"]
    })
    let out = ""
    let err = ""
    proc.stdout.on("data", (d) => {
      out += d
      if (options.input !== undefined && options.when?.test(out) && !proc.stdin.writableEnded)
        proc.stdin.end(options.input)
    })
    proc.stderr.on("data", (d) => (err += d))
    if (options.input === undefined) proc.stdin.end()
    else if (options.when === undefined) proc.stdin.end(options.input)
    proc.on("exit", (code) => resolve({ code, out, err }))
  })

const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`

/**
 * Run the real CLI on a pseudo-terminal (`script -qfec … /dev/null`): each step waits until the
 * screen (ANSI codes removed) matches `when` (counting from the previous step's match), then types
 * `type`. Resolves with everything the terminal showed, ANSI codes removed.
 */
export const runOnTerminal = (
  dir: string,
  args: ReadonlyArray<string>,
  steps: ReadonlyArray<{ readonly when: RegExp; readonly type: string }>,
  env: Record<string, string> = {}
) =>
  new Promise<{ code: number | null; screen: string }>((resolve) => {
    const command = [process.execPath, ...nodeArgs, bin("palyra"), ...args].map(quote).join(" ")
    const proc = spawn("script", ["-qfec", command, "/dev/null"], {
      cwd: dir,
      env: { ...cleanEnv(), TERM: "xterm", COLUMNS: "120", LINES: "40", ...env },
      stdio: ["pipe", "pipe", "pipe"]
    })
    let raw = ""
    let from = 0
    let step = 0
    const advance = () => {
      const next = steps[step]
      if (next === undefined) return
      const screen = stripVTControlCharacters(raw)
      const match = next.when.exec(screen.slice(from))
      if (match === null) return
      from += match.index + match[0].length
      step++
      proc.stdin.write(next.type)
      advance()
    }
    proc.stdout.on("data", (d) => {
      raw += d
      advance()
    })
    proc.stderr.on("data", (d) => (raw += d))
    proc.on("exit", (code) => resolve({ code, screen: stripVTControlCharacters(raw) }))
  })
