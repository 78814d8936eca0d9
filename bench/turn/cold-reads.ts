/**
 * bench/turn/cold-reads.ts: a new session's first turn in process, with the context engine as the
 * prompt stage (the daemon's): the kernel over a real SQLite journal (its writer thread) and an
 * instant scripted model; each measured turn starts a run on a fresh keyed session
 * (`startRunFollowing`) and drains its follower to the run's end. Prints CPU µs per turn (the whole
 * process, all threads) and the journal's `readTape` calls per turn — the context engine's cold
 * entry is the read this counts (a brand-new session's first prompt).
 * `BENCH_START_ROOT=<worktree> node --conditions=@palyra/source --import tsx bench/turn/cold-reads.ts [turns=1000]`
 * (defaults to this tree).
 */
import { mkdtempSync, rmSync } from "node:fs"
import { createRequire } from "node:module"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"

const root = process.env.BENCH_START_ROOT ?? join(fileURLToPath(import.meta.url), "..", "..", "..")
const core = join(root, "packages/core")
const req = createRequire(join(core, "package.json"))
const { Effect, Layer, Scope, Exit } = (await import(req.resolve("effect"))) as typeof import("effect")
const Core = (await import(join(core, "src/index.ts"))) as typeof import("../../packages/core/src/index.js")
const { ContextEngine } = (await import(
  join(core, "src/context.ts")
)) as typeof import("../../packages/core/src/context.js")
const Testing = (await import(join(core, "src/testing.ts"))) as typeof import("../../packages/core/src/testing.js")
const { SqliteJournal } = (await import(
  join(root, "packages/journal/src/index.ts")
)) as typeof import("../../packages/journal/src/index.js")

const turns = Number(process.argv[2] ?? 1000)
const { Caller, Follower, Gateway, Journal, PromptAssembler, ScriptedModel } = Core
type Follower = import("../../packages/core/src/index.js").Follower.Follower

const dir = mkdtempSync(join(tmpdir(), "palyra-cold-reads-"))
const reads = { count: 0 }
const model = ScriptedModel.make(() => ({ text: "ok" }))
const alice = Caller.user("alice")

const drain = (follower: Follower) =>
  new Promise<void>((done, fail) => {
    const pump = () => {
      for (;;) {
        const r = follower.take()
        if (r === Follower.Done) return done()
        if (Follower.isFailed(r)) return fail(r.failure)
        if (r === undefined) return follower.onReady(pump)
      }
    }
    pump()
  })

const program = Effect.gen(function* () {
  const sqlite = yield* SqliteJournal.make({ filename: join(dir, "bench.db") })
  const journal: typeof sqlite = {
    ...sqlite,
    readTape: ((sessionId, options) => {
      reads.count++
      return sqlite.readTape(sessionId, options)
    }) as typeof sqlite.readTape
  }
  const engine = yield* ContextEngine.make({
    journal,
    model,
    encoding: "o200k_base",
    contextWindow: 128_000,
    outputReserve: 4_096
  })
  const layer = Testing.gatewayLayer({
    model,
    journal: Layer.succeed(Journal.Journal, journal),
    promptAssembler: Layer.succeed(PromptAssembler.PromptAssembler, engine.assembler)
  }) as import("effect").Layer.Layer<import("../../packages/core/src/index.js").Gateway.Gateway>
  return yield* Effect.gen(function* () {
    const gateway = yield* Gateway.Gateway
    const turn = (key: string) =>
      Effect.gen(function* () {
        const scope = yield* Scope.make()
        const { follower } = yield* Scope.extend(gateway.startRunFollowing(alice, { text: "hello", key }), scope)
        yield* Effect.promise(() => drain(follower))
        yield* Scope.close(scope, Exit.void)
      })
    // Warm-up (the tokenizer, the JIT), then fresh sessions only.
    for (let i = 0; i < 300; i++) yield* turn(`warm${i}`)
    const r0 = reads.count
    const c0 = process.cpuUsage()
    const t0 = performance.now()
    for (let i = 0; i < turns; i++) yield* turn(`new${i}`)
    const wall = performance.now() - t0
    const c = process.cpuUsage(c0)
    return { wall, cpu: (c.user + c.system) / turns, reads: (reads.count - r0) / turns }
  }).pipe(Effect.provide(layer))
}).pipe(Effect.scoped)

const result = await Effect.runPromise(program)
rmSync(dir, { recursive: true, force: true })
console.log(
  `${turns} first turns of new sessions (context engine): ` +
    `${result.cpu.toFixed(1)} µs CPU/turn, ${(result.wall / turns).toFixed(3)} ms/turn, ${result.reads} readTape/turn`
)
console.log(
  JSON.stringify({
    bench: "cold-reads",
    root,
    cpuUsPerTurn: Number(result.cpu.toFixed(1)),
    msPerTurn: Number((result.wall / turns).toFixed(3)),
    readTapePerTurn: result.reads
  })
)
