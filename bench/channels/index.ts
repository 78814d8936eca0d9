/**
 * bench/channels: inbound chat messages routed per second, and the p99 admission latency.
 *
 * The path measured is the whole inbound side of `@palyra/channels`: decode → dedupe (a durable
 * claim on a SQLite channel store) → admission rules → binding lookup (every sender is paired) →
 * coalescer (5 ms window) → the channel's bounded queue → `Gateway.sendMessage` as the paired
 * principal, into the real kernel journaling to a SQLite file, with a scripted model that answers at
 * once (its reply goes through the outbox into the channel store; no connector sends it). One
 * message in ten is delivered twice, as a platform retry, and must be dropped as a duplicate.
 *
 * Two phases. **Throughput**: one message from each of N paired senders, all at once (so none merge
 * in the coalescer: every message is its own run); `routedPerSec` is messages admitted per second
 * until the last one is. **Latency**: messages arrive
 * paced at half that rate, round-robin over the senders (so none merge); `admitP99Ms` is the p99
 * from `receive` being called to `Gateway.sendMessage` returning for that message (measured by a
 * pass-through wrapper around the real Gateway), which includes the 5 ms coalescing window.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Caller, Gateway, ScriptedModel } from "@palyra/core"
import { gatewayLayer } from "@palyra/core/testing"
import { SqliteJournal } from "@palyra/journal"
import { Effect, Layer, ManagedRuntime } from "effect"
// The channels package by path: the bench package does not list it as a dependency (yet).
import { ChannelRouter, Channels, Pairing, SqliteChannelStore } from "../../packages/channels/src/index.js"
import { percentile, quick, result, round, table } from "../lib/report.js"

const MESSAGES = quick ? 400 : 4_000
const SENDERS = MESSAGES
const LATENCY_MESSAGES = quick ? 200 : 2_000
const RETRY_EVERY = 10

const dir = mkdtempSync(join(tmpdir(), "palyra-bench-channels-"))
const admittedAt = new Map<number, number>()
const receivedAt = new Map<number, number>()

const kernel = gatewayLayer({
  model: ScriptedModel.make(() => ({ text: "ok", usage: { inputTokens: 5, outputTokens: 1 } }), {
    recordPrompts: false
  }),
  journal: SqliteJournal.layer({ filename: join(dir, "journal.db") })
}) as Layer.Layer<Gateway.Gateway>

// A pass-through Gateway that notes when each message (ids in the text) was admitted.
const timedGateway = Layer.effect(
  Gateway.Gateway,
  Effect.map(
    Gateway.Gateway,
    (inner): Gateway.Service => ({
      ...inner,
      sendMessage: (caller, request) =>
        Effect.tap(inner.sendMessage(caller, request), () =>
          Effect.sync(() => {
            const now = performance.now()
            for (const m of request.text.matchAll(/msg-(\d+)/g)) admittedAt.set(Number(m[1]), now)
          })
        )
    })
  )
).pipe(Layer.provide(kernel))

const channels = Layer.scopedContext(
  Effect.gen(function* () {
    return yield* Channels.assemble({
      settings: [{ name: "bench", maxConcurrent: 32, maxQueue: MESSAGES, coalesce: { window: "5 millis" } }],
      connectors: []
    })
  })
).pipe(Layer.provideMerge(SqliteChannelStore.layer({ filename: join(dir, "channels.db") })))

const runtime = ManagedRuntime.make(channels.pipe(Layer.provide(timedGateway)))

const candidate = (i: number, sender: number, platformId: number) => ({
  channel: "bench",
  account: "bot",
  conversation: `dm-${sender}`,
  sender: { id: String(sender), verified: true },
  platformMessageId: `p-${platformId}`,
  text: `msg-${i} please summarise the thing`,
  attachments: [],
  isDirect: true,
  mentions: [],
  receivedAt: Date.now()
})

let nextId = 0
/** Send one message (and, every tenth, its platform retry); returns whether the retry was dropped. */
const send = (router: ChannelRouter.Service, sender: number) =>
  Effect.gen(function* () {
    const i = nextId++
    receivedAt.set(i, performance.now())
    const outcome = yield* router.receive("bench", candidate(i, sender, i))
    if (outcome._tag !== "Admitted") return yield* Effect.die(new Error(`message ${i}: ${JSON.stringify(outcome)}`))
    if (i % RETRY_EVERY !== 0) return 0
    const again = yield* router.receive("bench", candidate(i, sender, i))
    if (again._tag !== "Rejected" || again.reason !== "duplicate")
      return yield* Effect.die(new Error("retry not dropped"))
    return 1
  })

const untilAdmitted = (ids: ReadonlyArray<number>) =>
  Effect.gen(function* () {
    while (ids.some((i) => !admittedAt.has(i))) yield* Effect.sleep("2 millis")
    return Math.max(...ids.map((i) => admittedAt.get(i)!))
  })

const program = Effect.gen(function* () {
  const pairing = yield* Pairing.Pairing
  const router = yield* ChannelRouter.ChannelRouter
  const op = Caller.operator("bench")
  for (let s = 0; s < SENDERS; s++) {
    yield* pairing.bind(op, {
      identity: { channel: "bench", account: "bot", senderId: String(s) },
      principal: `user-${s}`
    })
  }

  // Throughput: every sender at once, one message each.
  const start = performance.now()
  const dropped = yield* Effect.forEach(
    Array.from({ length: SENDERS }, (_, s) => s),
    (s) => send(router, s),
    { concurrency: "unbounded" }
  )
  const burstIds = Array.from({ length: nextId }, (_, i) => i)
  const last = yield* untilAdmitted(burstIds)
  const burst = {
    messages: burstIds.length,
    seconds: (last - start) / 1000,
    duplicates: dropped.reduce<number>((a, b) => a + b, 0)
  }
  const routedPerSec = burst.messages / burst.seconds
  const runs = (yield* router.stats()).admitted

  // Latency: paced at half that rate, in 10 ms ticks, round-robin over senders.
  const rate = Math.min(routedPerSec / 2, 2_000)
  const perTick = Math.max(1, Math.round(rate / 100))
  const paced: Array<number> = []
  let sender = 0
  while (paced.length < LATENCY_MESSAGES) {
    for (let k = 0; k < perTick && paced.length < LATENCY_MESSAGES; k++) {
      paced.push(nextId)
      yield* send(router, sender)
      sender = (sender + 1) % SENDERS
    }
    yield* Effect.sleep("10 millis")
  }
  yield* untilAdmitted(paced)
  const latencies = paced.map((i) => admittedAt.get(i)! - receivedAt.get(i)!).sort((a, b) => a - b)
  return { burst, routedPerSec, runs, rate: perTick * 100, latencies }
})

const main = async () => {
  const { burst, routedPerSec, runs, rate, latencies } = await runtime.runPromise(program)
  await runtime.dispose()
  rmSync(dir, { recursive: true, force: true })
  table(
    `channels: ${burst.messages} messages from as many paired senders, at once (+${burst.duplicates} platform retries)`,
    [
      {
        "routed/s": round(routedPerSec, 0),
        runs,
        "elapsed s": round(burst.seconds, 2)
      }
    ]
  )
  table(`admission latency: ${latencies.length} messages paced at ${rate}/s (5 ms coalescing window included)`, [
    {
      "p50 ms": round(percentile(latencies, 50)),
      "p99 ms": round(percentile(latencies, 99)),
      "max ms": round(latencies.at(-1) ?? 0)
    }
  ])
  result("channels", { routedPerSec: round(routedPerSec, 0), admitP99Ms: round(percentile(latencies, 99)) })
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
