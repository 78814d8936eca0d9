/**
 * Per-call overhead of the process sandbox tiers: `/bin/true` through `Sandbox.spawn` with tier
 * `none` (a plain process group), `limits` (allowlist + prlimit) and `os` (bubblewrap namespaces).
 * Tiers that are not available on the machine are reported as such (-1), never silently skipped.
 * WASM plugin tools are not built yet: their keys are absent.
 */
import { chmodSync, mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { BuiltinTools } from "@palyra/core/tools"
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
const by = (tier: string) => rows.find((r) => r.tier === tier)!.p50
result("tools", { noneMs: by("none"), limitsMs: by("limits"), osMs: by("os") })
