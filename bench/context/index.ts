/**
 * bench/context: prompt assembly and compaction by the context engine.
 *
 * A session is grown the way the agent loop grows it (a user message, a model turn, every fifth turn
 * a tool call and its result; each event appended to the in-memory journal and pushed onto the
 * loop's history array, the assembler called before every model turn) to 10, 100, 1,000 and 10,000
 * turns, with an 8,192-token window (o200k_base, real counts) and a scripted model that writes the
 * summaries. At each length: the median time of one assembly (append a user message, assemble), and
 * the prompt's tokens, which must stay flat once the window is full. Compaction time is the median of
 * the assemblies that compacted. For contrast, the kernel's default assembler (the whole history,
 * every call) at the same lengths, and a cold assembly (a new engine reading back to the last
 * compaction) at 10,000 turns. Last, reference resolution: the median time to assemble a message
 * that references a 4 KiB workspace file (`@file:`: confine, read, count, digest, journal a note).
 */

import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Ids, type Journal, MemoryJournal, PromptAssembler, Records, ScriptedModel, type TapeEvent } from "@palyra/core"
import { ContextEngine, References, Tokenizer } from "@palyra/core/context"
import { Effect } from "effect"
import { quick, result, round, table } from "../lib/report.js"

const WINDOW = 8_192
const SIZES = [10, 100, 1_000, 10_000]
const REPS = quick ? 40 : 200

const mustKeep = (r: { readonly messages: ReadonlyArray<{ readonly role: string; readonly text?: string }> }) =>
  (/<must-keep>\n([\s\S]*?)<\/must-keep>/.exec(r.messages[0]?.text ?? "")?.[1] ?? "").trim()
const model = ScriptedModel.make(
  (r) => ({
    text: `## Goal\nBench.\n## Decisions\n- go on\n## Facts & identifiers\n${mustKeep(r)}\n## Files\n- (facts)\n## Open work\n- none`
  }),
  { recordPrompts: false }
)

const median = (xs: Array<number>) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN

interface Grown {
  readonly journal: Journal.Service
  readonly session: Records.Session
  readonly history: Array<TapeEvent.TapeEvent>
  readonly compactMs: Array<number>
}

const base = (session: Records.Session) => ({ sessionId: session.id, runId: null, at: 1 })

const assembleOnce = (assembler: PromptAssembler.Service, g: Pick<Grown, "session" | "history">, runId: Ids.RunId) =>
  assembler.assemble({ session: g.session, runId, history: g.history, instructions: "Be helpful.", tools: [] })

/** Grow a session by `turns` turns the way the loop does, assembling before every model turn. */
const grow = (engine: ContextEngine.ContextEngine, g: Grown, from: number, turns: number) =>
  Effect.gen(function* () {
    const runId = (yield* Ids.ulid) as Ids.RunId
    const push = (events: ReadonlyArray<TapeEvent.NewTapeEvent>) =>
      Effect.map(g.journal.append(g.session.id, events as never), (stored) => {
        for (const e of stored) g.history.push(e)
      })
    for (let i = from; i < from + turns; i++) {
      yield* push([
        {
          _tag: "UserMessage",
          ...base(g.session),
          text: `turn ${i}: order ${(0x9f86d0 + i).toString(16)}, ${i * 13} units for docs/t${i}.md`
        }
      ])
      const before = g.history.length
      const t0 = performance.now()
      const { estimatedTokens } = yield* assembleOnce(engine.assembler, g, runId)
      const ms = performance.now() - t0
      const head = yield* g.journal.headSeq(g.session.id)
      if (head > (g.history.at(-1)?.tapeSeq ?? 0) && g.history.length === before) g.compactMs.push(ms)
      yield* push([
        {
          _tag: "ModelRequest",
          ...base(g.session),
          turn: 1,
          model: "scripted",
          messages: 0,
          estimatedTokens,
          tools: []
        },
        {
          _tag: "AssistantMessage",
          ...base(g.session),
          turn: 1,
          text: `Noted turn ${i}: stored at src/orders/${i}.json.`,
          finishReason: "stop"
        }
      ])
      if (i % 5 === 0) {
        const call = (yield* Ids.ulid) as Ids.ToolCallId
        yield* push([
          {
            _tag: "ToolProposed",
            ...base(g.session),
            toolCallId: call,
            providerCallId: "c",
            tool: "math.double",
            args: { x: i },
            argsDigest: "d"
          },
          {
            _tag: "ToolResult",
            ...base(g.session),
            toolCallId: call,
            tool: "math.double",
            status: "ok",
            output: `{"doubled":${i * 2}}`,
            truncated: false,
            durationMs: 1
          }
        ])
        yield* assembleOnce(engine.assembler, g, runId)
        yield* push([
          { _tag: "AssistantMessage", ...base(g.session), turn: 2, text: `It is ${i * 2}.`, finishReason: "stop" }
        ])
      }
    }
  })

/** Median time of one assembly after a new user message, and the tokens of the first (at exactly the grown length). */
const measure = (assembler: PromptAssembler.Service, g: Grown, reps: number) =>
  Effect.gen(function* () {
    const runId = (yield* Ids.ulid) as Ids.RunId
    const times: Array<number> = []
    let tokens = 0
    for (let r = 0; r < reps; r++) {
      const [stored] = yield* g.journal.append(g.session.id, [
        { _tag: "UserMessage", ...base(g.session), text: `measure ${r}: order ${r.toString(16)}` }
      ])
      g.history.push(stored!)
      const t0 = performance.now()
      const out = yield* assembleOnce(assembler, g, runId)
      times.push(performance.now() - t0)
      if (r === 0) tokens = out.estimatedTokens
      const [reply] = yield* g.journal.append(g.session.id, [
        { _tag: "AssistantMessage", ...base(g.session), turn: 1, text: `ok ${r}`, finishReason: "stop" }
      ])
      g.history.push(reply!)
    }
    return { ms: median(times), tokens }
  })

const newSession = (journal: Journal.Service) =>
  Effect.gen(function* () {
    const session = Records.makeSession({ id: (yield* Ids.ulid) as Ids.SessionId, principal: "bench" })
    yield* journal.createSession(session)
    return session
  })

const main = Effect.gen(function* () {
  const t0 = performance.now()
  yield* Tokenizer.counter("o200k_base")
  const tokenizerLoadMs = performance.now() - t0

  // Warm-up (JIT): grow and measure a throwaway session first.
  {
    const journal = yield* MemoryJournal.make()
    const engine = yield* ContextEngine.make({
      journal,
      model,
      encoding: "o200k_base",
      contextWindow: WINDOW,
      outputReserve: 1_024
    })
    const g: Grown = { journal, session: yield* newSession(journal), history: [], compactMs: [] }
    yield* grow(engine, g, 1, 300)
    yield* measure(engine.assembler, g, REPS)
  }

  const rows: Array<Record<string, string | number>> = []
  const figures: Record<string, number> = {}
  const compactMs: Array<number> = []
  let last: { engine: ContextEngine.ContextEngine; g: Grown } | undefined
  for (const size of SIZES) {
    const journal = yield* MemoryJournal.make()
    const engine = yield* ContextEngine.make({
      journal,
      model,
      encoding: "o200k_base",
      contextWindow: WINDOW,
      outputReserve: 1_024
    })
    const g: Grown = { journal, session: yield* newSession(journal), history: [], compactMs }
    const tg = performance.now()
    yield* grow(engine, g, 1, size)
    const growMs = performance.now() - tg
    const ours = yield* measure(engine.assembler, g, REPS)
    // The default assembler over a copy of the same history (capped: it is linear per call).
    const plain = yield* measure(PromptAssembler.fromHistory, { ...g, history: [...g.history] }, Math.min(REPS, 20))
    const compactions =
      g.history.length === 0
        ? 0
        : (yield* journal.readTape(g.session.id, { afterSeq: 0 })).filter((e) => e._tag === "CompactionApplied").length
    figures[`assembleMs${size}`] = round(ours.ms, 3)
    figures[`promptTokens${size}`] = ours.tokens
    rows.push({
      turns: size,
      "assemble ms (median)": round(ours.ms, 3),
      "prompt tokens": ours.tokens,
      compactions,
      "grow s": round(growMs / 1000, 2),
      "default assembler ms": round(plain.ms, 3),
      "default prompt tokens*": plain.tokens
    })
    last = { engine, g }
  }

  // Cold: a new engine (nothing cached) over the 10,000-turn session reads back to its last compaction.
  const { g } = last!
  const cold = yield* ContextEngine.make({
    journal: g.journal,
    model,
    encoding: "o200k_base",
    contextWindow: WINDOW,
    outputReserve: 1_024
  })
  const tc = performance.now()
  yield* assembleOnce(cold.assembler, g, (yield* Ids.ulid) as Ids.RunId)
  const coldAssembleMs10000 = performance.now() - tc

  // References: each message names a 4 KiB file; every resolution is fresh (a new message).
  const workspace = mkdtempSync(join(tmpdir(), "palyra-bench-refs-"))
  writeFileSync(join(workspace, "notes.md"), "Order ORD-1042 ships from dock 7 on Friday.\n".repeat(90))
  const refJournal = yield* MemoryJournal.make()
  const refSession = yield* newSession(refJournal)
  const refs = References.resolving(PromptAssembler.fromHistory, {
    journal: refJournal,
    workspace,
    modelName: "openai:gpt-4o"
  })
  const refTimes: Array<number> = []
  for (let r = 0; r < REPS; r++) {
    const runId = (yield* Ids.ulid) as Ids.RunId
    const [message] = yield* refJournal.append(refSession.id, [
      { _tag: "UserMessage", sessionId: refSession.id, runId, at: 1, text: `summarize @file:notes.md (${r})` }
    ])
    const tr = performance.now()
    yield* refs.assemble({ session: refSession, runId, history: [message!], instructions: undefined, tools: [] })
    refTimes.push(performance.now() - tr)
  }
  const referenceResolveMs = median(refTimes)

  table(`bench/context: window ${WINDOW} tokens (o200k_base), ${REPS} assemblies per size`, rows)
  console.log("* the kernel's default assembler sends the whole history (estimated at 4 characters a token)")
  const ratio = figures.assembleMs10000! / figures.assembleMs10!
  console.log(
    `\nassembleMs10000 / assembleMs10: ${round(ratio)} (goal ≤ 3); compaction: median ${round(median([...compactMs]), 2)} ms over ${compactMs.length}; cold assembly at 10,000 turns: ${round(coldAssembleMs10000, 2)} ms; tokenizer load: ${round(tokenizerLoadMs)} ms; @file: reference (4 KiB): median ${round(referenceResolveMs, 3)} ms`
  )
  result("context", {
    assembleMs10: figures.assembleMs10!,
    assembleMs100: figures.assembleMs100!,
    assembleMs1000: figures.assembleMs1000!,
    assembleMs10000: figures.assembleMs10000!,
    promptTokens10: figures.promptTokens10!,
    promptTokens100: figures.promptTokens100!,
    promptTokens1000: figures.promptTokens1000!,
    promptTokens10000: figures.promptTokens10000!,
    windowTokens: WINDOW,
    compactMs: round(median([...compactMs]), 3),
    coldAssembleMs10000: round(coldAssembleMs10000, 3),
    tokenizerLoadMs: round(tokenizerLoadMs, 1),
    referenceResolveMs: round(referenceResolveMs, 3)
  })
})

await Effect.runPromise(main)
