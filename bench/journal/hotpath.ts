/**
 * bench/journal/hotpath.ts: the journal's per-append pure work on each side of the thread hop, for
 * two checkouts alternating in one process (before/after without the machine's load between them):
 * `node --import tsx bench/journal/hotpath.ts <rootA> <rootB> [rounds] [batches]`
 * (roots: repository checkouts, e.g. `/work/wt/base16b` and `.`). Per round and checkout, over the
 * 32-writer phase's batches (32 appends of the bench's tool-result event): the payload's canonical
 * JSON (core `Canonical.canonicalJson` of the sorted body), `encodeBatch` (main thread) and
 * `decodeBatch` (writer thread), as CPU µs per append (`process.threadCpuUsage` over ≥ 100 ms:
 * tick-sampled clocks need long slices) and wall ns per append. Strings are read once
 * (`charCodeAt`) so a lazily concatenated result pays its flattening, as a post would.
 */
import { resolve } from "node:path"
import { pathToFileURL } from "node:url"
import { event, sid } from "./events.js"

interface Codec {
  readonly canonicalJson: (value: unknown) => string
  readonly encodeBatch: (ops: ReadonlyArray<unknown>) => { readonly header: string; readonly payloads: string }
  readonly decodeBatch: (encoded: { readonly header: string; readonly payloads: string }) => ReadonlyArray<unknown>
}

const [rootA, rootB] = [process.argv[2], process.argv[3]]
if (rootA === undefined || rootB === undefined) throw new Error("usage: hotpath.ts <rootA> <rootB> [rounds] [batches]")
const rounds = Number(process.argv[4] ?? 5)
const batches = Number(process.argv[5] ?? 4000)

const load = async (root: string): Promise<Codec> => {
  const at = (path: string) => pathToFileURL(resolve(root, path)).href
  const canonical = (await import(at("packages/core/src/domain/Canonical.ts"))) as Pick<Codec, "canonicalJson">
  const protocol = (await import(at("packages/journal/src/internal/protocol.ts"))) as Omit<Codec, "canonicalJson">
  return {
    canonicalJson: canonical.canonicalJson,
    encodeBatch: protocol.encodeBatch,
    decodeBatch: protocol.decodeBatch
  }
}
const codecs = { A: await load(rootA), B: await load(rootB) }

// The bodies as the journal encodes them: the event minus its envelope, keys in sorted order.
const bodies = Array.from({ length: 64 }, (_, i) => {
  const { _tag, sessionId, runId, at, ...body } = event(sid(i % 32), i)
  const sorted: Record<string, unknown> = {}
  for (const k of Object.keys(body).sort()) sorted[k] = (body as Record<string, unknown>)[k]
  return sorted
})
for (const b of bodies) {
  if (codecs.A.canonicalJson(b) !== codecs.B.canonicalJson(b)) throw new Error("the two checkouts' payloads differ")
}
const batchOf = (codec: Codec, n: number) =>
  Array.from({ length: 32 }, (_, w) => ({
    op: "append",
    sessionId: sid(w),
    effects: {},
    events: [
      { tag: "ToolResult", runId: null, at: 1_700_000_000_000 + n, payload: codec.canonicalJson(bodies[(n + w) & 63]!) }
    ]
  }))

let sink = 0
const measure = (work: () => void) => {
  const cpu = process.threadCpuUsage()
  const t0 = performance.now()
  work()
  const wallMs = performance.now() - t0
  const used = process.threadCpuUsage(cpu)
  const appends = batches * 32
  return { cpuUs: (used.user + used.system) / appends, wallNs: (wallMs * 1e6) / appends }
}
const fmt = (m: { cpuUs: number; wallNs: number }) => `${m.cpuUs.toFixed(3)} µs (${m.wallNs.toFixed(0)} ns wall)`

const totals: Record<string, Record<"A" | "B", Array<number>>> = {}
const add = (what: string, side: "A" | "B", wallNs: number) => {
  totals[what] ??= { A: [], B: [] }
  totals[what][side].push(wallNs)
}
for (let r = 0; r < rounds; r++) {
  for (const side of (r % 2 === 0 ? ["A", "B"] : ["B", "A"]) as Array<"A" | "B">) {
    const codec = codecs[side]
    const canonical = measure(() => {
      for (let i = 0; i < batches * 32; i++) {
        const s = codec.canonicalJson(bodies[i & 63]!)
        sink += s.charCodeAt(s.length >> 1)
      }
    })
    const sample = Array.from({ length: 16 }, (_, n) => batchOf(codec, n))
    const encoded = sample.map((b) => codec.encodeBatch(b))
    const encode = measure(() => {
      for (let i = 0; i < batches; i++) {
        const e = codec.encodeBatch(sample[i & 15]!)
        sink += e.header.charCodeAt(e.header.length >> 1) + e.payloads.charCodeAt(e.payloads.length >> 1)
      }
    })
    const decode = measure(() => {
      for (let i = 0; i < batches; i++) sink += codec.decodeBatch(encoded[i & 15]!).length
    })
    add("canonicalJson", side, canonical.wallNs)
    add("encodeBatch", side, encode.wallNs)
    add("decodeBatch", side, decode.wallNs)
    console.log(
      `round ${r} ${side}: canonicalJson ${fmt(canonical)}, encodeBatch ${fmt(encode)}, decodeBatch ${fmt(decode)}`
    )
  }
}
const median = (xs: Array<number>) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const summary: Record<string, number> = {}
for (const [what, t] of Object.entries(totals)) {
  summary[`${what}NsA`] = Math.round(median(t.A))
  summary[`${what}NsB`] = Math.round(median(t.B))
}
console.log(`(sink ${sink % 7})`)
console.log(JSON.stringify({ bench: "journal-hotpath", rounds, batches, ...summary }))
