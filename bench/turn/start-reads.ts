/**
 * bench/turn/start-reads.ts: a turn's start and delivery in process, without HTTP or a model
 * server: the kernel over a real SQLite journal (its writer thread) and an instant scripted model;
 * each turn starts a run on an existing keyed session (round-robin over `sessions`) and takes its
 * events from a follower until the run ends. Prints CPU µs per turn (the whole process, all
 * threads) and the journal's `readTape` calls per turn.
 * `BENCH_START_ROOT=<worktree> node --conditions=@palyra/source --import tsx bench/turn/start-reads.ts [turns=3000] [sessions=50]`
 * (defaults to this tree). `BENCH_START_MODE=follow` takes the follower with `startRun` + `follow`
 * (the path before `startRunFollowing`); the default uses `startRunFollowing` where the tree has it.
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
const Testing = (await import(join(core, "src/testing.ts"))) as typeof import("../../packages/core/src/testing.js")
const { SqliteJournal } = (await import(
  join(root, "packages/journal/src/index.ts")
)) as typeof import("../../packages/journal/src/index.js")

const turns = Number(process.argv[2] ?? 3000)
const sessions = Number(process.argv[3] ?? 50)
const { Caller, Follower, Gateway, Journal, ScriptedModel } = Core
type Follower = import("../../packages/core/src/index.js").Follower.Follower
type Service = import("../../packages/core/src/index.js").Gateway.Service

const dir = mkdtempSync(join(tmpdir(), "palyra-start-reads-"))
const reads = { count: 0 }
const journal = Layer.scoped(
  Journal.Journal,
  Effect.map(SqliteJournal.make({ filename: join(dir, "bench.db") }), (j) => ({
    ...j,
    readTape: ((sessionId, options) => {
      reads.count++
      return j.readTape(sessionId, options)
    }) as typeof j.readTape
  }))
)
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

const mode = process.env.BENCH_START_MODE === "follow" ? "follow" : "auto"
const program = Effect.gen(function* () {
  const gateway = yield* Gateway.Gateway
  const following = mode !== "follow" && typeof (gateway as Partial<Service>).startRunFollowing === "function"
  const turn = (i: number) =>
    Effect.gen(function* () {
      const request = { text: `turn ${i}`, key: `k${i % sessions}` }
      const scope = yield* Scope.make()
      const follower = following
        ? (yield* Scope.extend(gateway.startRunFollowing(alice, request), scope)).follower
        : yield* Scope.extend(
            Effect.flatMap(gateway.startRun(alice, request), (r) => r.follow),
            scope
          )
      yield* Effect.promise(() => drain(follower))
      yield* Scope.close(scope, Exit.void)
    })
  // Every session exists (and is warm) before the measured turns.
  for (let i = 0; i < Math.max(sessions, 300); i++) yield* turn(i)
  const r0 = reads.count
  const c0 = process.cpuUsage()
  const t0 = performance.now()
  for (let i = 0; i < turns; i++) yield* turn(i)
  const wall = performance.now() - t0
  const c = process.cpuUsage(c0)
  return { following, wall, cpu: (c.user + c.system) / turns, reads: (reads.count - r0) / turns }
}).pipe(Effect.provide(Testing.gatewayLayer({ model, journal })), Effect.scoped)

const result = await Effect.runPromise(program)
rmSync(dir, { recursive: true, force: true })
console.log(
  `${result.following ? "startRunFollowing" : "startRun + follow"}: ${turns} turns over ${sessions} sessions, ` +
    `${result.cpu.toFixed(1)} µs CPU/turn, ${(result.wall / turns).toFixed(3)} ms/turn, ${result.reads} readTape/turn`
)
console.log(
  JSON.stringify({
    bench: "start-reads",
    root,
    following: result.following,
    cpuUsPerTurn: Number(result.cpu.toFixed(1)),
    msPerTurn: Number((result.wall / turns).toFixed(3)),
    readTapePerTurn: result.reads
  })
)
