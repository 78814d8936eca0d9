/**
 * bench/memory: the SQLite memory store (FTS5 + BM25 + recency) and auto-injection.
 *
 * - **Ingest**: items saved in batches of 500 (`saveMany`, one transaction each), every item going
 *   through redaction and dedupe (a hash lookup and an FTS near-duplicate query), into a file that
 *   already holds the journal's schema. 100,000 items (`--quick`: 10,000) spread over 500 principals,
 *   8–20 words each from a 5,000-word Zipf-distributed vocabulary.
 * - **Search**: p50/p99 of `search` (3–6 query words, limit 5) for a random principal, over the full
 *   store; and the same for one principal that owns 20% of all items (the worst case for the
 *   principal filter).
 * - **Inject overhead**: the time `Memory.injecting` adds to one model call's assembly — search,
 *   render, and the `SessionNote` appended to the SQLite journal — for the first call of a run (the
 *   search runs) and for later calls of the same run (cached).
 *
 * Goals: search p99 ≤ 20 ms, ingest ≥ 5,000 items/s, inject overhead ≤ 5 ms.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Ids, PromptAssembler, Records, type TapeEvent } from "@palyra/core"
import { Memory, type MemoryStore } from "@palyra/core/memory"
import { SqliteJournal, SqliteMemoryStore } from "@palyra/journal"
import { Effect } from "effect"
import { percentile, quick, result, round, table } from "../lib/report.js"

const ITEMS = quick ? 10_000 : 100_000
const PRINCIPALS = 500
const SEARCHES = quick ? 500 : 2_000
const INJECTS = quick ? 200 : 1_000
const BATCH = 500

// A deterministic generator (mulberry32), so runs are comparable.
let seed = 0x9e3779b9
const rand = () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = seed
  t = Math.imul(t ^ (t >>> 15), t | 1)
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}
const SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "pe", "sh", "an", "or", "el", "ix", "um", "da"]
const VOCAB = Array.from({ length: 5_000 }, (_, i) => {
  let w = ""
  let n = i + 1
  while (n > 0) {
    w += SYLLABLES[n % SYLLABLES.length]
    n = Math.floor(n / SYLLABLES.length)
  }
  return `${w}${i % 7 === 0 ? "s" : ""}`
})
// Zipf-like: word rank r drawn with probability ∝ 1/r.
const harmonic = VOCAB.reduce((s, _, i) => s + 1 / (i + 1), 0)
const cumulative = VOCAB.map((_, i) => i).reduce<Array<number>>((acc, i) => {
  acc.push((acc.at(-1) ?? 0) + 1 / (i + 1) / harmonic)
  return acc
}, [])
const word = () => {
  const x = rand()
  let lo = 0
  let hi = cumulative.length - 1
  while (lo < hi) {
    const mid = (lo + hi) >> 1
    if (cumulative[mid]! < x) lo = mid + 1
    else hi = mid
  }
  return VOCAB[lo]!
}
const sentence = (min: number, max: number) =>
  Array.from({ length: min + Math.floor(rand() * (max - min + 1)) }, word).join(" ")
const KINDS: ReadonlyArray<MemoryStore.MemoryKind> = ["fact", "preference", "procedure", "note"]
const heavy = "principal-heavy"
const principalOf = () => (rand() < 0.2 ? heavy : `principal-${Math.floor(rand() * PRINCIPALS)}`)

const dir = mkdtempSync(join(tmpdir(), "palyra-bench-memory-"))
const filename = join(dir, "memory.db")

const program = Effect.gen(function* () {
  const journal = yield* SqliteJournal.make({ filename })
  const store = yield* SqliteMemoryStore.make({ filename })

  // ---- ingest ----------------------------------------------------------------------------------
  let merged = 0
  const t0 = performance.now()
  for (let done = 0; done < ITEMS; done += BATCH) {
    const batch = Array.from({ length: Math.min(BATCH, ITEMS - done) }, () => ({
      principal: principalOf(),
      kind: KINDS[Math.floor(rand() * KINDS.length)]!,
      text: sentence(8, 20)
    }))
    for (const r of yield* store.saveMany(batch)) if (r.outcome === "merged") merged++
  }
  const ingestSeconds = (performance.now() - t0) / 1000
  const ingestPerSec = ITEMS / ingestSeconds

  // ---- search ----------------------------------------------------------------------------------
  const searchOnce = (principal: string) =>
    Effect.gen(function* () {
      const text = sentence(3, 6)
      const s = performance.now()
      const hits = yield* store.search({ principal, text, limit: 5 })
      return { ms: performance.now() - s, hits: hits.length }
    })
  const measure = (principalFor: () => string) =>
    Effect.gen(function* () {
      const times: Array<number> = []
      let found = 0
      for (let i = 0; i < SEARCHES; i++) {
        const r = yield* searchOnce(principalFor())
        times.push(r.ms)
        if (r.hits > 0) found++
      }
      times.sort((a, b) => a - b)
      return { p50: percentile(times, 50), p99: percentile(times, 99), found: found / SEARCHES }
    })
  const spread = yield* measure(() => `principal-${Math.floor(rand() * PRINCIPALS)}`)
  const worst = yield* measure(() => heavy)

  // ---- inject overhead ---------------------------------------------------------------------------
  const session = Records.makeSession({ id: yield* Ids.makeSessionId, principal: heavy, createdAt: Date.now() })
  yield* journal.createSession(session)
  const injecting = Memory.injecting(PromptAssembler.fromHistory, { store, journal })
  const history: Array<TapeEvent.TapeEvent> = []
  for (let i = 0; i < 20; i++) {
    history.push({
      _tag: "UserMessage",
      sessionId: session.id,
      runId: null,
      tapeSeq: i + 1,
      at: 1,
      text: sentence(6, 14)
    })
  }
  const assembleWith = (assembler: PromptAssembler.Service, runId: Ids.RunId) =>
    Effect.gen(function* () {
      const s = performance.now()
      yield* assembler.assemble({ session, runId, history, instructions: "Be helpful.", tools: [] })
      return performance.now() - s
    })
  const miss: Array<number> = []
  const hit: Array<number> = []
  for (let i = 0; i < INJECTS; i++) {
    const runId = yield* Ids.makeRunId
    history[history.length - 1] = { ...history[history.length - 1]!, text: sentence(4, 10) } as TapeEvent.TapeEvent
    const base = yield* assembleWith(PromptAssembler.fromHistory, runId)
    const first = yield* assembleWith(injecting, runId)
    const again = yield* assembleWith(injecting, runId)
    miss.push(Math.max(0, first - base))
    hit.push(Math.max(0, again - base))
  }
  miss.sort((a, b) => a - b)
  hit.sort((a, b) => a - b)
  // Its two parts, alone: the search (the same kind of query, same principal) and the note append.
  const searchPart: Array<number> = []
  const notePart: Array<number> = []
  for (let i = 0; i < INJECTS; i++) {
    const s = performance.now()
    yield* store.search({ principal: heavy, sessionId: session.id, text: sentence(4, 10), limit: 5 })
    searchPart.push(performance.now() - s)
    const n = performance.now()
    yield* journal.append(session.id, [
      {
        _tag: "SessionNote",
        sessionId: session.id,
        runId: null,
        at: Date.now(),
        author: "bench",
        text: "injected 5 memory item(s): …"
      }
    ])
    notePart.push(performance.now() - n)
  }
  searchPart.sort((a, b) => a - b)
  notePart.sort((a, b) => a - b)

  table(`memory store: ${ITEMS.toLocaleString()} items, ${PRINCIPALS} principals (+ one with ~20%)`, [
    {
      measure: "ingest (saveMany ×500, dedupe on)",
      value: `${Math.round(ingestPerSec).toLocaleString()} items/s`,
      detail: `${round(ingestSeconds, 2)} s, ${merged} merged`
    },
    {
      measure: "search, random principal",
      value: `p50 ${round(spread.p50, 3)} ms / p99 ${round(spread.p99, 3)} ms`,
      detail: `${Math.round(spread.found * 100)}% of searches found something`
    },
    {
      measure: "search, the 20% principal",
      value: `p50 ${round(worst.p50, 3)} ms / p99 ${round(worst.p99, 3)} ms`,
      detail: `${Math.round(worst.found * 100)}% of searches found something`
    },
    {
      measure: "inject overhead, first call of a run",
      value: `p50 ${round(percentile(miss, 50), 3)} ms / p99 ${round(percentile(miss, 99), 3)} ms`,
      detail: "search + render + SessionNote append"
    },
    {
      measure: "  of which: search alone",
      value: `p50 ${round(percentile(searchPart, 50), 3)} ms / p99 ${round(percentile(searchPart, 99), 3)} ms`,
      detail: "the 20% principal"
    },
    {
      measure: "  of which: note append alone",
      value: `p50 ${round(percentile(notePart, 50), 3)} ms / p99 ${round(percentile(notePart, 99), 3)} ms`,
      detail: "one SessionNote, SQLite journal"
    },
    {
      measure: "inject overhead, later calls of a run",
      value: `p50 ${round(percentile(hit, 50), 3)} ms / p99 ${round(percentile(hit, 99), 3)} ms`,
      detail: "cached"
    }
  ])
  result("memory", {
    searchP50Ms: round(Math.max(spread.p50, worst.p50), 3),
    searchP99Ms: round(Math.max(spread.p99, worst.p99), 3),
    ingestPerSec: Math.round(ingestPerSec),
    injectOverheadMs: round(percentile(miss, 50), 3),
    injectOverheadP99Ms: round(percentile(miss, 99), 3),
    items: ITEMS
  })
})

Effect.runPromise(Effect.scoped(program))
  .catch((e) => {
    console.error(e)
    process.exitCode = 1
  })
  .finally(() => rmSync(dir, { recursive: true, force: true }))
