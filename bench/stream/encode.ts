/**
 * bench/stream/encode: CPU per event of the gRPC RunStream's envelope encoder alone, as the RunStream
 * handler calls it (`internal/runStreamWire.ts`): 200 sessions × 200 `AssistantDelta`s, each a new
 * object (no memo hit, as with one stream per session), sessions interleaved, in batches of 1 and 16;
 * and a run's other events (accepted, user message, states, model request, full message, usage).
 * `node --import tsx bench/stream/encode.ts [path to another tree's runStreamWire.ts]` — with a path,
 * the same events through that tree's encoder too (its `batchEncoder`, or `eventEnvelopes` and a
 * `Buffer.concat` per batch as before round 11), alternating, for a before/after in one process.
 */
import type { TapeEvent } from "@palyra/core"
import { Proto } from "@palyra/transport-grpc"

type Encoder = (events: ReadonlyArray<TapeEvent.TapeEvent>) => Buffer
type Wire = {
  batchEncoder?: (r: (e: TapeEvent.TapeEvent) => Proto.RunStreamResponse) => Encoder
  eventEnvelopes: (r: (e: TapeEvent.TapeEvent) => Proto.RunStreamResponse) => (e: TapeEvent.TapeEvent) => Buffer
}
// The transport's own `response` (protobuf-es from the transport's dependencies: the bench has none).
const { create } = (await import(
  "../../packages/transport-grpc/node_modules/@bufbuild/protobuf/dist/esm/index.js" as string
)) as {
  create: (schema: typeof Proto.RunStreamResponseSchema, init: object) => Proto.RunStreamResponse
}
const { toPbEvent } = await import("../../packages/transport-grpc/src/internal/convert.js")
const response = (e: TapeEvent.TapeEvent): Proto.RunStreamResponse =>
  create(Proto.RunStreamResponseSchema, { payload: { case: "event", value: toPbEvent(e) } })
const encoderOf = (wire: Wire): Encoder => {
  if (wire.batchEncoder) return wire.batchEncoder(response)
  const one = wire.eventEnvelopes(response)
  return (events) => (events.length === 1 ? one(events[0]!) : Buffer.concat(events.map(one)))
}

const SESSIONS = 200
const DELTAS = 200
const events = (round: number) => {
  const out: Array<Array<TapeEvent.TapeEvent>> = []
  for (let s = 0; s < SESSIONS; s++) {
    const sessionId = `ses_01JD${String(s).padStart(22, "0")}`
    const runId = `run_01JD${String(round * SESSIONS + s).padStart(22, "0")}`
    const list: Array<TapeEvent.TapeEvent> = []
    for (let i = 0; i < DELTAS; i++)
      list.push({
        _tag: "AssistantDelta",
        sessionId,
        runId,
        tapeSeq: 3 + i,
        at: 1_763_820_000_123 + i,
        turn: 1,
        text: `w${i} `
      } as unknown as TapeEvent.TapeEvent)
    out.push(list)
  }
  return out
}

/** CPU µs per event over one pass: sessions interleaved, `batch` deltas of a session per call. */
const measure = (encode: Encoder, batch: number, round: number) => {
  const sessions = events(round)
  let bytes = 0
  const t0 = process.cpuUsage()
  for (let at = 0; at < DELTAS; at += batch)
    for (const list of sessions) bytes += encode(list.slice(at, at + batch)).byteLength
  const t = process.cpuUsage(t0)
  return { us: (t.user + t.system) / (SESSIONS * DELTAS), bytes }
}

/** A run's other events (what a plain streamed run writes besides its deltas). */
const others = (round: number, s: number): Array<TapeEvent.TapeEvent> => {
  const sessionId = `ses_01JD${String(s).padStart(22, "0")}`
  const runId = `run_01JD${String(round * SESSIONS + s).padStart(22, "0")}`
  const base = { sessionId, runId, at: 1_763_820_000_000 }
  const text = Array.from({ length: DELTAS }, (_, i) => `w${i} `).join("")
  return [
    { _tag: "RunAccepted", ...base, tapeSeq: 1, principal: "operator", queuedBehind: null },
    { _tag: "UserMessage", ...base, tapeSeq: 2, text: "stream 200 words" },
    { _tag: "RunStateChanged", ...base, tapeSeq: 3, from: "Accepted", to: "Running", reason: "" },
    { _tag: "ModelRequest", ...base, tapeSeq: 4, turn: 1, model: "bench", messages: 1, estimatedTokens: 9, tools: [] },
    { _tag: "AssistantMessage", ...base, tapeSeq: 205, turn: 1, text, finishReason: "stop" },
    { _tag: "Usage", ...base, tapeSeq: 206, turn: 1, inputTokens: 9, outputTokens: 200 },
    { _tag: "RunStateChanged", ...base, tapeSeq: 207, from: "Running", to: "Completed", reason: "" }
  ] as unknown as Array<TapeEvent.TapeEvent>
}

/** CPU µs per run for its other events, one batch each (as they are usually committed). */
const measureOthers = (encode: Encoder, round: number) => {
  const runs = Array.from({ length: SESSIONS }, (_, s) => others(round, s))
  const t0 = process.cpuUsage()
  for (const list of runs) for (const e of list) encode([e])
  const t = process.cpuUsage(t0)
  return (t.user + t.system) / SESSIONS
}

const here = (await import("../../packages/transport-grpc/src/internal/runStreamWire.js")) as Wire
const other = process.argv[2] ? ((await import(process.argv[2])) as Wire) : undefined
const trees: Array<[string, Encoder]> = [["this tree", encoderOf(here)]]
if (other) trees.push([process.argv[2]!, encoderOf(other)])
const results: Record<string, Record<string, Array<number>>> = {}
for (let round = 0; round < 12; round++)
  for (const batch of [1, 16, 0])
    for (const [name, encode] of round % 2 === 0 ? trees : [...trees].reverse()) {
      const us = batch === 0 ? measureOthers(encode, round) : measure(encode, batch, round).us
      if (round < 2) continue // warm-up
      const row = results[name] ?? {}
      results[name] = row
      const key = batch === 0 ? "othersPerRun" : `batch${batch}`
      const xs = row[key] ?? []
      row[key] = xs
      xs.push(us)
    }
const median = (xs: Array<number>) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
console.log("encoder                      batch    CPU µs per event (othersPerRun: per run), median of 10")
for (const [name, row] of Object.entries(results))
  for (const [batch, xs] of Object.entries(row))
    console.log(`${name.slice(-28).padEnd(28)} ${batch.padEnd(8)} ${median(xs).toFixed(3)}`)
console.log(
  JSON.stringify({
    bench: "stream-encode",
    ...Object.fromEntries(
      Object.entries(results).flatMap(([name, row]) =>
        Object.entries(row).map(([key, xs]) => [
          `${name === "this tree" ? "" : "other_"}${key}${key === "othersPerRun" ? "Us" : "UsPerEvent"}`,
          median(xs)
        ])
      )
    )
  })
)
