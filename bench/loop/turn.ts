/**
 * bench/loop/turn: the in-process CPU cost of a whole turn on the Gateway — `startRun`, the agent
 * loop, the real SQLite journal (a file, hash-chained), real Cedar policy, and one subscriber that
 * reads the run's events to its end — with a zero-latency scripted model. A plain turn answers with
 * text; a tool turn calls `time.now` (a low-risk built-in tool, allowed by Cedar's default policy)
 * and then answers. Turns rotate over 10 keyed sessions, like `bench/turn`'s client.
 *
 * The figure is CPU time (user + system of this process) per turn: the median of rounds of turns
 * run one after another. Run alone (`node --conditions=@palyra/source --import tsx
 * bench/loop/turn.ts [--quick]`, e.g. under `--cpu-prof`) or from `bench/loop/index.ts`.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Caller, Gateway, ScriptedModel } from "@palyra/core"
import { CedarPolicy } from "@palyra/core/cedar"
import { collect, gatewayLayer } from "@palyra/core/testing"
import { BuiltinTools } from "@palyra/core/tools"
import { SqliteJournal } from "@palyra/journal"
import { Effect, type Layer, ManagedRuntime } from "effect"

const usage = { inputTokens: 10, outputTokens: 5 }
const model = ScriptedModel.make(
  (request) => {
    const last = request.messages.at(-1)
    if (last?.role === "tool") return { text: "It is noon.", usage }
    if (last?.role === "user" && last.text.startsWith("what time")) {
      return { toolCalls: [{ name: "time.now", args: {} }], usage }
    }
    return { text: ["Hello", " there."], usage }
  },
  { recordPrompts: false }
)

const turnOnce = (text: string, key: string) =>
  Effect.gen(function* () {
    const gateway = yield* Gateway.Gateway
    const { events } = yield* gateway.startRun(Caller.user("bench"), { text, key })
    const seen = yield* collect(events)
    const last = seen.at(-1)
    if (last?._tag !== "RunStateChanged" || last.to !== "Done") throw new Error("turn did not finish")
  })

const median = (xs: Array<number>) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

/** CPU µs per plain turn and per one-tool turn (medians over rounds), in one Gateway over one file. */
export const measureTurns = async (quick: boolean) => {
  const dir = mkdtempSync(join(tmpdir(), "palyra-bench-loop-turn-"))
  const runtime = ManagedRuntime.make(
    gatewayLayer({
      model,
      tools: [BuiltinTools.timeTool],
      journal: SqliteJournal.layer({ filename: join(dir, "bench.db") }),
      policy: CedarPolicy.layer()
    }) as Layer.Layer<Gateway.Gateway>
  )
  let n = 0
  const round = async (text: string, turns: number) => {
    const c0 = process.cpuUsage()
    for (let i = 0; i < turns; i++) await runtime.runPromise(turnOnce(text, `${text.slice(0, 4)}-${n++ % 10}`))
    const c = process.cpuUsage(c0)
    return (c.user + c.system) / turns
  }
  const rounds = quick ? 5 : 15
  const perRound = quick ? 20 : 40
  await round("hello", quick ? 20 : 100)
  await round("what time is it?", quick ? 20 : 100)
  const plain: Array<number> = []
  const tool: Array<number> = []
  for (let r = 0; r < rounds; r++) {
    plain.push(await round("hello", perRound))
    tool.push(await round("what time is it?", perRound))
  }
  await runtime.dispose()
  rmSync(dir, { recursive: true, force: true })
  return { turnCpuUs: median(plain), toolTurnCpuUs: median(tool) }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const figures = await measureTurns(process.argv.includes("--quick"))
  console.log(
    JSON.stringify({ turnCpuUs: Math.round(figures.turnCpuUs), toolTurnCpuUs: Math.round(figures.toolTurnCpuUs) })
  )
}
