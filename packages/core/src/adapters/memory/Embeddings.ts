/**
 * Vectors for memory search: an `embed` hook and a brute-force cosine index, blended into the
 * store's lexical score.
 *
 * `withVectors(store, { embedder, index })` decorates any `MemoryStore`: every item it saves is
 * embedded and put in the index (with the item's scope); a search embeds the query, scores the
 * principal's vectors in scope by cosine (brute force: every vector of the principal is compared,
 * fine for thousands of items per principal, not millions), and blends
 *
 *     score = (1 − vectorWeight) · lexical score + vectorWeight · max(0, cosine)
 *
 * over the union of the lexical hits and the nearest vectors, so an item found only by meaning
 * (no word in common) can rank too. Isolation holds as in the store: the index is filtered by the
 * principal (and agent and session scope), and every vector hit is read back through the store's
 * own `get(principal, id)`, which also drops expired and forgotten items. An embedder that fails
 * costs the vector part only: the item is saved and the search answers lexically.
 *
 * Embedders: `fromFunction`, or `AiSdkModel.embedder(model)` in `@palyra/core/ai-sdk` (the AI
 * SDK's `embedMany` with any embedding model). Indexes: `memoryIndex()` here, and
 * `SqliteVectorIndex` in `@palyra/journal` (vectors kept beside the items, migration 0009).
 *
 * @since 0.1.0
 */
import { Effect, Option } from "effect"
import type { JournalError } from "../../domain/Errors.js"
import type * as MemoryStore from "../../ports/MemoryStore.js"

/** Turns texts into vectors (one per text, all of one dimension). @since 0.1.0 @category Models */
export interface Embedder {
  /** The model's name (vectors of different models are never compared). */
  readonly model: string
  readonly embed: (texts: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<ReadonlyArray<number>>, unknown>
}

/** An item's vector and its scope. @since 0.1.0 @category Models */
export interface VectorEntry {
  readonly id: string
  readonly principal: string
  readonly agent: string | null
  readonly sessionId: string | null
  readonly model: string
  readonly vector: Float32Array
}

/** Where vectors are kept. @since 0.1.0 @category Models */
export interface VectorIndex {
  readonly put: (entries: ReadonlyArray<VectorEntry>) => Effect.Effect<void, JournalError>
  readonly remove: (principal: string, id: string) => Effect.Effect<void, JournalError>
  /** The `k` entries of the principal in scope (same model) nearest to `vector`, by cosine. */
  readonly nearest: (
    scope: MemoryStore.MemoryScope & { readonly model: string },
    vector: Float32Array,
    k: number
  ) => Effect.Effect<ReadonlyArray<{ readonly id: string; readonly cosine: number }>, JournalError>
}

/** An embedder from a plain function. @since 0.1.0 @category Constructors */
export const fromFunction = (
  model: string,
  embed: (texts: ReadonlyArray<string>) => Promise<ReadonlyArray<ReadonlyArray<number>>>
): Embedder => ({ model, embed: (texts) => Effect.tryPromise(() => embed(texts)) })

/** Cosine similarity of two vectors of one dimension (0 when either is zero). @since 0.1.0 @category Utils */
export const cosine = (a: Float32Array, b: Float32Array): number => {
  if (a.length !== b.length) return 0
  let dot = 0
  let na = 0
  let nb = 0
  for (let i = 0; i < a.length; i++) {
    const x = a[i]!
    const y = b[i]!
    dot += x * y
    na += x * x
    nb += y * y
  }
  return na === 0 || nb === 0 ? 0 : dot / Math.sqrt(na * nb)
}

/** Whether an entry is in a search's scope (the store's rule). @since 0.1.0 @category Utils */
export const inScope = (entry: VectorEntry, scope: MemoryStore.MemoryScope & { readonly model: string }): boolean =>
  entry.principal === scope.principal &&
  entry.model === scope.model &&
  (entry.agent === null || entry.agent === (scope.agent ?? null)) &&
  (entry.sessionId === null || entry.sessionId === (scope.sessionId ?? null))

/** The `k` best of `entries` by cosine to `vector`. @since 0.1.0 @category Utils */
export const topK = (
  entries: Iterable<{ readonly id: string; readonly vector: Float32Array }>,
  vector: Float32Array,
  k: number
): Array<{ readonly id: string; readonly cosine: number }> => {
  const out: Array<{ id: string; cosine: number }> = []
  for (const e of entries) {
    const c = cosine(e.vector, vector)
    if (out.length < k) out.push({ id: e.id, cosine: c })
    else if (c > out[out.length - 1]!.cosine) out[out.length - 1] = { id: e.id, cosine: c }
    else continue
    out.sort((x, y) => y.cosine - x.cosine)
  }
  return out.sort((x, y) => y.cosine - x.cosine)
}

/** A vector index in process memory. @since 0.1.0 @category Constructors */
export const memoryIndex = (): VectorIndex => {
  const entries = new Map<string, VectorEntry>()
  return {
    put: (list) =>
      Effect.sync(() => {
        for (const e of list) entries.set(e.id, e)
      }),
    remove: (principal, id) =>
      Effect.sync(() => {
        if (entries.get(id)?.principal === principal) entries.delete(id)
      }),
    nearest: (scope, vector, k) =>
      Effect.sync(() =>
        topK(
          [...entries.values()].filter((e) => inScope(e, scope)),
          vector,
          k
        )
      )
  }
}

/** @since 0.1.0 @category Models */
export interface VectorOptions {
  readonly embedder: Embedder
  /** Default: `memoryIndex()`. */
  readonly index?: VectorIndex | undefined
  /** Weight of the cosine in the blended score (0–1, default 0.4). */
  readonly vectorWeight?: number | undefined
  /** Vector candidates considered per search (default 4 × the limit, at least 20). */
  readonly candidates?: number | undefined
}

const toVector = (v: ReadonlyArray<number>) => Float32Array.from(v)

/**
 * A store whose searches blend lexical and vector scores (see the module notes).
 *
 * @since 0.1.0
 * @category Constructors
 */
export const withVectors = (store: MemoryStore.Service, options: VectorOptions): MemoryStore.Service => {
  const { embedder } = options
  const index = options.index ?? memoryIndex()
  const w = Math.min(1, Math.max(0, options.vectorWeight ?? 0.4))

  const embedItems = (items: ReadonlyArray<MemoryStore.MemoryItem>) =>
    items.length === 0
      ? Effect.void
      : embedder.embed(items.map((i) => i.text)).pipe(
          Effect.flatMap((vectors) =>
            index.put(
              items.flatMap((item, n) => {
                const v = vectors[n]
                return v === undefined
                  ? []
                  : [
                      {
                        id: item.id,
                        principal: item.principal,
                        agent: item.agent,
                        sessionId: item.sessionId,
                        model: embedder.model,
                        vector: toVector(v)
                      }
                    ]
              })
            )
          ),
          Effect.catchAllCause((cause) =>
            Effect.logWarning("memory: embedding failed; the item is searched by words only", cause)
          ),
          Effect.withSpan("Embeddings.embedItems", { attributes: { items: items.length } })
        )

  const search: MemoryStore.Service["search"] = (query) =>
    Effect.gen(function* () {
      const limit = query.limit ?? 5
      const k = options.candidates ?? Math.max(20, limit * 4)
      const lexical = yield* store.search({ ...query, limit: Math.min(50, k) })
      const embedded = yield* embedder.embed([query.text]).pipe(
        Effect.map((vs) => (vs[0] === undefined ? Option.none() : Option.some(toVector(vs[0])))),
        Effect.catchAllCause((cause) =>
          Effect.as(Effect.logWarning("memory: query embedding failed; lexical search only", cause), Option.none())
        )
      )
      if (Option.isNone(embedded)) return lexical.slice(0, limit)
      const near = yield* index.nearest(
        { principal: query.principal, agent: query.agent, sessionId: query.sessionId, model: embedder.model },
        embedded.value,
        k
      )
      const cosines = new Map(near.map((n) => [n.id, n.cosine]))
      const hits = new Map<string, MemoryStore.SearchHit>()
      for (const h of lexical) hits.set(h.item.id, h)
      for (const n of near) {
        if (hits.has(n.id) || n.cosine <= 0) continue
        // Read back through the store: its own principal filter, expiry and deletions apply.
        const item = yield* store.get(query.principal, n.id)
        if (Option.isNone(item)) continue
        if (query.kinds !== undefined && !query.kinds.includes(item.value.kind)) continue
        hits.set(n.id, { item: item.value, relevance: 0, recency: 0, score: 0 })
      }
      return [...hits.values()]
        .map((h) => ({ ...h, score: (1 - w) * h.score + w * Math.max(0, cosines.get(h.item.id) ?? 0) }))
        .sort((a, b) => b.score - a.score || (a.item.id < b.item.id ? -1 : 1))
        .slice(0, limit)
    }).pipe(Effect.withSpan("Embeddings.search"))

  return {
    ...store,
    save: (input) => Effect.tap(store.save(input), (r) => embedItems([r.item])),
    saveMany: (inputs) => Effect.tap(store.saveMany(inputs), (rs) => embedItems(rs.map((r) => r.item))),
    search,
    forget: (principal, id) => Effect.tap(store.forget(principal, id), () => index.remove(principal, id)),
    decide: (id, decision) =>
      Effect.tap(store.decide(id, decision), (r) => (r.item === null ? Effect.void : embedItems([r.item])))
  }
}
