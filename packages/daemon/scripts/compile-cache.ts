/**
 * The build's last step (tsup's `onSuccess`): write the compile cache palyrad ships beside its
 * bundle, `dist/compile-cache`. It starts the built palyrad once on a throw-away data dir — with the
 * empty directory in place and no `NODE_COMPILE_CACHE`, palyrad fills that directory in Node's
 * portable form (`bin/palyrad.ts`) — waits for its first 200 on `/readyz`, and stops it; Node writes
 * the cache at exit. Then the first start after an install compiles nothing it loads to get ready
 * (PERF-NOTES round 16: the cold start's ~90 ms of compiling). Only the Node version that ran this
 * reads it (Node keys the cache by version); any other starts as without it.
 */
import { spawn } from "node:child_process"
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"

/**
 * Fill `<dist>/compile-cache` by starting `<dist>/bin/palyrad.js` once; rejects if it cannot, and
 * then leaves no `compile-cache` directory (palyrad uses Node's default cache without one).
 */
export const writeCompileCache = async (dist: string): Promise<void> => {
  const cache = join(dist, "compile-cache")
  try {
    await fill(dist, cache)
  } catch (error) {
    rmSync(cache, { recursive: true, force: true })
    throw error
  }
}

const fill = async (dist: string, cache: string): Promise<void> => {
  const bin = join(dist, "bin", "palyrad.js")
  rmSync(cache, { recursive: true, force: true })
  mkdirSync(cache)
  const data = mkdtempSync(join(tmpdir(), "palyrad-compile-cache-"))
  // The shebang's node flags: V8 rejects a code cache written under flags that change code generation.
  const flags = (/^#!.*?\bnode((?: +--\S+)*) *$/.exec(readFileSync(bin, "utf8").split("\n", 1)[0]!)?.[1] ?? "")
    .split(" ")
    .filter(Boolean)
  // The builder's own PALYRA_* settings (a config file, ports, a model) are not this start's.
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("PALYRA_")))
  const env: Record<string, string | undefined> = {
    ...inherited,
    PALYRA_LOG_LEVEL: "warning",
    PALYRA_GRPC_PORT: "0",
    NODE_COMPILE_CACHE: undefined,
    NODE_DISABLE_COMPILE_CACHE: undefined
  }
  try {
    const child = spawn(process.execPath, [...flags, bin, "--port", "0"], {
      cwd: data,
      env,
      stdio: ["ignore", "ignore", "pipe"]
    })
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)))
    let err = ""
    const url = await new Promise<string>((resolve, reject) => {
      child.stderr.on("data", (d) => {
        err += d
        const m = /listening on (http:\/\/\S+)/.exec(err)
        if (m) resolve(m[1]!)
      })
      void exited.then((code) => reject(new Error(`palyrad exited ${code} before it listened: ${err}`)))
    })
    while (
      !(await fetch(`${url}/readyz`).then(
        (r) => r.ok,
        () => false
      ))
    )
      await new Promise((r) => setTimeout(r, 10))
    child.kill("SIGTERM")
    const code = await exited
    if (code !== 0) throw new Error(`palyrad exited ${code} on SIGTERM: ${err}`)
  } finally {
    rmSync(data, { recursive: true, force: true })
  }
  const entries = readdirSync(cache, { recursive: true })
  if (entries.length < 2) throw new Error(`palyrad wrote no compile cache in ${cache}`)
}
