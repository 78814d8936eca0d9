/**
 * Per-call overhead of the process sandbox tiers: `/bin/true` through `Sandbox.spawn` with tier
 * `none` (a plain process group), `limits` (allowlist + prlimit) and `os` (bubblewrap namespaces).
 * Tiers that are not available on the machine are reported as such (-1), never silently skipped.
 * WASM plugin tools (`@palyra/plugins`): the `word-count` example reading a workspace file through
 * its host function; `wasmColdMs` is load (read, digest, compile) plus the first call, `wasmWarmMs`
 * the median of later calls (each one a fresh instance in a fresh worker, by design).
 */
import { execFileSync } from "node:child_process"
import { chmodSync, existsSync, mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { type Ids, Tool } from "@palyra/core"
import { BuiltinTools } from "@palyra/core/tools"
import { Plugins } from "@palyra/plugins"
import { Effect } from "effect"
import { percentile, quick, result, round, table } from "../lib/report.js"

const { Sandbox } = BuiltinTools
const workspace = mkdtempSync(join(tmpdir(), "palyra-bench-tools-"))
// A root daemon runs sandboxed programs as nobody: the workspace must be theirs to enter.
chmodSync(workspace, 0o777)
const calls = quick ? 8 : 60
const user = process.getuid?.() === 0 ? { uid: 65534, gid: 65534 } : undefined

const measure = async (tier: "none" | "limits" | "os") => {
  const options = { tier, allowExecutables: ["/bin/true", "/usr/bin/true"], ...(user ? { user } : {}) }
  const once = Sandbox.spawn(
    { tool: "bench", argv: ["/bin/true"], workspace, cwd: workspace, timeoutMs: 10_000, maxOutputBytes: 1024 },
    options
  )
  const samples: Array<number> = []
  for (let i = 0; i < calls + 2; i++) {
    const t0 = performance.now()
    const r = await Effect.runPromise(Effect.either(once))
    if (r._tag === "Left") return { tier, available: false, detail: r.left.message, p50: -1, p99: -1 }
    if (i >= 2) samples.push(performance.now() - t0)
  }
  samples.sort((a, b) => a - b)
  return { tier, available: true, detail: "", p50: round(percentile(samples, 50)), p99: round(percentile(samples, 99)) }
}

const rows: Array<Awaited<ReturnType<typeof measure>>> = []
for (const tier of ["none", "limits", "os"] as const) rows.push(await measure(tier))
table(
  `Sandbox.spawn("/bin/true"), ${calls} calls per tier (ms)`,
  rows.map((r) => ({
    tier: r.tier,
    "p50 ms": r.available ? r.p50 : "n/a",
    "p99 ms": r.available ? r.p99 : "n/a",
    note: r.detail.slice(0, 60)
  }))
)

const measureWasm = async () => {
  const pkg = dirname(fileURLToPath(import.meta.resolve("@palyra/plugins/package.json")))
  const example = join(pkg, "examples", "word-count")
  if (!existsSync(join(example, "plugin.wasm"))) {
    execFileSync(process.execPath, [join(pkg, "scripts", "build-examples.mjs")], { stdio: "inherit" })
  }
  writeFileSync(join(workspace, "words.txt"), "the quick brown fox jumps over the lazy dog\n".repeat(200))
  const context: Tool.ToolContext = {
    sessionId: "01J00000000000000000000000" as Ids.SessionId,
    runId: "01J00000000000000000000001" as Ids.RunId,
    toolCallId: "01J00000000000000000000002" as Ids.ToolCallId,
    principal: "bench",
    note: () => Effect.void
  }
  const t0 = performance.now()
  const plugin = await Effect.runPromise(Plugins.load(example, { workspace }))
  const runtime = Tool.makeRuntime([plugin.tool])
  const call = runtime.execute(plugin.tool, { path: "words.txt" }, context)
  await Effect.runPromise(call)
  const cold = performance.now() - t0
  const samples: Array<number> = []
  for (let i = 0; i < calls; i++) {
    const t = performance.now()
    await Effect.runPromise(call)
    samples.push(performance.now() - t)
  }
  samples.sort((a, b) => a - b)
  return { cold: round(cold), p50: round(percentile(samples, 50)), p99: round(percentile(samples, 99)) }
}
const wasm = await measureWasm()
table(`WASM plugin word-count (Extism, fresh worker per call), ${calls} warm calls (ms)`, [
  { "cold ms (load + 1st call)": wasm.cold, "warm p50 ms": wasm.p50, "warm p99 ms": wasm.p99 }
])
const by = (tier: string) => rows.find((r) => r.tier === tier)!.p50
result("tools", {
  noneMs: by("none"),
  limitsMs: by("limits"),
  osMs: by("os"),
  wasmColdMs: wasm.cold,
  wasmWarmMs: wasm.p50
})
