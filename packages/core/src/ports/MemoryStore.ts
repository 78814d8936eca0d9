/**
 * The `MemoryStore` port: what an agent remembers across sessions.
 *
 * An item has a **scope** — always a principal, optionally narrowed to an agent and/or a session —
 * a kind (`fact`, `preference`, `procedure`, `note`), its text (redacted before it is stored), where
 * it came from (run, tape seq), an optional expiry (TTL) and a `pinned` flag. Search is full text
 * (BM25) blended with recency (and a boost for pinned items).
 *
 * **Isolation is the store's job.** Every read takes the principal, and the store's own query
 * filters on it: a search for principal A never returns principal B's items, whatever the caller
 * passes. An item scoped to an agent or a session is found only by searches for that agent or
 * session; an item without one is found by all of the principal's searches.
 *
 * **Dedupe.** Saving text whose normalized form (NFKC, case, punctuation, spacing) matches an item
 * of the same scope and kind, or whose words overlap one's by at least `mergeOverlap` (Jaccard),
 * merges into that item (its time is refreshed, the higher confidence and the later expiry kept)
 * instead of adding a near-copy.
 *
 * **Candidates.** Post-run reflection proposes items with a confidence in basis points; those below
 * the auto-write threshold wait here for review (`propose`, `candidates`, `decide`).
 *
 * `makeMemory` / `layerMemory` keep everything in process memory (search by MiniSearch's BM25); the
 * SQLite store of `@palyra/journal` (`SqliteMemoryStore`) uses FTS5.
 *
 * Search here is lexical (BM25) plus recency; `Embeddings.withVectors` (`@palyra/core/memory`)
 * decorates any store with an embedding hook and a brute-force cosine index blended into the score.
 *
 * @since 0.1.0
 */
import { Clock, Context, Duration, Effect, Layer, Option, Schema } from "effect"
import MiniSearch from "minisearch"
import { sha256 } from "../domain/Canonical.js"
import { Conflict, InvalidArgument, type JournalError, NotFound } from "../domain/Errors.js"
import { ulid } from "../domain/Ids.js"
import { defaultRedactor, type Redactor } from "../domain/Redaction.js"

// =============================================================================================
// Models
// =============================================================================================

/** @since 0.1.0 @category Models */
export const MemoryKind = Schema.Literal("fact", "preference", "procedure", "note")
/** @since 0.1.0 @category Models */
export type MemoryKind = typeof MemoryKind.Type

/** An item as stored. Times are epoch milliseconds. @since 0.1.0 @category Models */
export interface MemoryItem {
  readonly id: string
  readonly principal: string
  /** Only searches for this agent find it (`null`: every agent of the principal). */
  readonly agent: string | null
  /** Only searches in this session find it (`null`: every session of the principal). */
  readonly sessionId: string | null
  readonly kind: MemoryKind
  /** The text, as stored (redacted). */
  readonly text: string
  readonly sourceRunId: string | null
  readonly sourceSeq: number | null
  /** How sure the writer was, in basis points (0–10,000), when known. */
  readonly confidenceBps: number | null
  readonly pinned: boolean
  readonly createdAt: number
  readonly updatedAt: number
  /** Not returned (and purged) from this time on. */
  readonly expiresAt: number | null
}

/** Where a read looks: the principal's items, narrowed by agent and session. @since 0.1.0 @category Models */
export interface MemoryScope {
  readonly principal: string
  readonly agent?: string | null | undefined
  readonly sessionId?: string | null | undefined
}

/** @since 0.1.0 @category Models */
export interface NewMemory extends MemoryScope {
  readonly kind: MemoryKind
  readonly text: string
  readonly sourceRunId?: string | null | undefined
  readonly sourceSeq?: number | null | undefined
  readonly confidenceBps?: number | null | undefined
  readonly pinned?: boolean | undefined
  /** Forget it after this long… */
  readonly ttl?: Duration.DurationInput | undefined
  /** …or at this time (epoch ms). */
  readonly expiresAt?: number | null | undefined
}

/** @since 0.1.0 @category Models */
export interface SaveResult {
  readonly item: MemoryItem
  /** `merged`: an item of the same scope and kind said the same thing; it was refreshed instead. */
  readonly outcome: "created" | "merged"
}

/** @since 0.1.0 @category Models */
export interface SearchQuery extends MemoryScope {
  readonly text: string
  /** At most this many hits (1–50, default 5). */
  readonly limit?: number | undefined
  readonly kinds?: ReadonlyArray<MemoryKind> | undefined
}

/** @since 0.1.0 @category Models */
export interface SearchHit {
  readonly item: MemoryItem
  /** The blended score (higher is better): `wRelevance · relevance + wRecency · recency (+ pinBoost)`. */
  readonly score: number
  /** BM25, relative to the best hit of this search (0–1]. */
  readonly relevance: number
  /** `2^(-age / halfLife)` of the item's last update (0–1]. */
  readonly recency: number
}

/** @since 0.1.0 @category Models */
export const CandidateStatus = Schema.Literal("pending", "accepted", "rejected")
/** @since 0.1.0 @category Models */
export type CandidateStatus = typeof CandidateStatus.Type

/** Something reflection proposes to remember, waiting for review. @since 0.1.0 @category Models */
export interface Candidate {
  readonly id: string
  readonly principal: string
  readonly agent: string | null
  readonly sessionId: string | null
  readonly kind: MemoryKind
  readonly text: string
  readonly confidenceBps: number
  readonly sourceRunId: string | null
  readonly sourceSeq: number | null
  readonly status: CandidateStatus
  readonly createdAt: number
  readonly decidedAt: number | null
  readonly decidedBy: string | null
  readonly reason: string | null
  /** The item an accepted candidate became (or merged into). */
  readonly itemId: string | null
}

/** @since 0.1.0 @category Models */
export interface NewCandidate extends MemoryScope {
  readonly kind: MemoryKind
  readonly text: string
  readonly confidenceBps: number
  readonly sourceRunId?: string | null | undefined
  readonly sourceSeq?: number | null | undefined
}

/** @since 0.1.0 @category Models */
export interface CandidateFilter {
  /** One principal's candidates (omit for every principal's: operators). */
  readonly principal?: string | undefined
  readonly status?: CandidateStatus | undefined
  readonly limit?: number | undefined
}

/** @since 0.1.0 @category Models */
export interface Decision {
  readonly status: "accepted" | "rejected"
  readonly by: string
  readonly reason?: string | undefined
}

/** @since 0.1.0 @category Models */
export interface Service {
  /** Save an item, or merge it into a near-identical one of the same scope and kind. */
  readonly save: (input: NewMemory) => Effect.Effect<SaveResult, InvalidArgument | JournalError>
  /** Save several items in one transaction (ingest). */
  readonly saveMany: (
    inputs: ReadonlyArray<NewMemory>
  ) => Effect.Effect<ReadonlyArray<SaveResult>, InvalidArgument | JournalError>
  /** Full-text search within the scope, best first. */
  readonly search: (query: SearchQuery) => Effect.Effect<ReadonlyArray<SearchHit>, InvalidArgument | JournalError>
  /** One of the principal's items (`None` for another principal's, or an expired one). */
  readonly get: (principal: string, id: string) => Effect.Effect<Option.Option<MemoryItem>, JournalError>
  /** The principal's items, newest first. */
  readonly list: (
    principal: string,
    options?: { readonly kinds?: ReadonlyArray<MemoryKind> | undefined; readonly limit?: number | undefined }
  ) => Effect.Effect<ReadonlyArray<MemoryItem>, JournalError>
  /** Delete one of the principal's items (`NotFound` for another principal's). */
  readonly forget: (principal: string, id: string) => Effect.Effect<void, NotFound | JournalError>
  /** Delete expired items; returns how many. */
  readonly purgeExpired: Effect.Effect<number, JournalError>
  /** Queue a candidate for review (a pending one with the same normalized text and scope is returned instead). */
  readonly propose: (input: NewCandidate) => Effect.Effect<Candidate, InvalidArgument | JournalError>
  /** Candidates, oldest first. */
  readonly candidates: (filter?: CandidateFilter) => Effect.Effect<ReadonlyArray<Candidate>, JournalError>
  readonly getCandidate: (id: string) => Effect.Effect<Option.Option<Candidate>, JournalError>
  /**
   * Accept (the candidate is saved as an item, merged with duplicates) or reject a pending
   * candidate; `Conflict` when it was already decided.
   */
  readonly decide: (
    id: string,
    decision: Decision
  ) => Effect.Effect<
    { readonly candidate: Candidate; readonly item: MemoryItem | null },
    NotFound | Conflict | InvalidArgument | JournalError
  >
}

/** @since 0.1.0 @category Tags */
export class MemoryStore extends Context.Tag("@palyra/core/MemoryStore")<MemoryStore, Service>() {}

// =============================================================================================
// Shared rules (both adapters use them)
// =============================================================================================

/** How a store ranks and merges. @since 0.1.0 @category Models */
export interface StoreOptions {
  /** Redacts item and candidate texts before they are stored (default: the default rules). */
  readonly redactor?: Redactor | undefined
  /** Longest item text, in characters (default 4,000). */
  readonly maxTextChars?: number | undefined
  /** Word overlap (Jaccard, 0–1) from which two items of one scope and kind are merged (default 0.8). */
  readonly mergeOverlap?: number | undefined
  /** Recency halves every this long (default 30 days). */
  readonly recencyHalfLife?: Duration.DurationInput | undefined
  /** Weights of relevance and recency in the blended score (default 0.8 and 0.2). */
  readonly weights?: { readonly relevance: number; readonly recency: number } | undefined
  /** Added to the score of pinned items (default 0.1). */
  readonly pinBoost?: number | undefined
}

/** The options with their defaults. @since 0.1.0 @category Models */
export interface ResolvedOptions {
  readonly redactor: Redactor
  readonly maxTextChars: number
  readonly mergeOverlap: number
  readonly halfLifeMs: number
  readonly wRelevance: number
  readonly wRecency: number
  readonly pinBoost: number
}

/** @since 0.1.0 @category Utils */
export const resolveOptions = (o: StoreOptions = {}): ResolvedOptions => ({
  redactor: o.redactor ?? defaultRedactor,
  maxTextChars: o.maxTextChars ?? 4_000,
  mergeOverlap: o.mergeOverlap ?? 0.8,
  halfLifeMs: Math.max(1, Duration.toMillis(Duration.decode(o.recencyHalfLife ?? "30 days"))),
  wRelevance: o.weights?.relevance ?? 0.8,
  wRecency: o.weights?.recency ?? 0.2,
  pinBoost: o.pinBoost ?? 0.1
})

const STOPWORDS = new Set(
  (
    "a an and are as at be but by do does for from has have how i if in into is it its me my of on or our so " +
    "that the their them then there these they this to was we were what when where which who why will with " +
    "you your"
  ).split(" ")
)

/** Text for comparison: NFKC, lower case, punctuation removed, spaces collapsed. @since 0.1.0 @category Utils */
export const normalize = (text: string): string =>
  text
    .normalize("NFKC")
    .toLowerCase()
    .replace(/[^\p{L}\p{N}]+/gu, " ")
    .trim()

/** The digest that finds exact duplicates (of the normalized text). @since 0.1.0 @category Utils */
export const contentHash = (text: string): string => sha256(normalize(text))

/** The distinct words of a text (normalized). @since 0.1.0 @category Utils */
export const wordSet = (text: string): Set<string> => new Set(normalize(text).split(" ").filter(Boolean))

/** Jaccard overlap of two word sets (0–1). @since 0.1.0 @category Utils */
export const overlap = (a: ReadonlySet<string>, b: ReadonlySet<string>): number => {
  if (a.size === 0 && b.size === 0) return 1
  let shared = 0
  for (const w of a) if (b.has(w)) shared++
  return shared / (a.size + b.size - shared)
}

/** The distinct words of a text without common stop words (all of them if nothing else is left). @since 0.1.0 @category Utils */
export const contentWords = (text: string): Set<string> => {
  const words = wordSet(text)
  const content = new Set([...words].filter((w) => !STOPWORDS.has(w)))
  return content.size > 0 ? content : words
}

/**
 * The words a search looks for: normalized, without common stop words (unless nothing else is
 * left), at most 32, each at most 64 characters. Never raw user syntax: adapters quote each word.
 *
 * @since 0.1.0
 * @category Utils
 */
export const searchTerms = (text: string): ReadonlyArray<string> => {
  const words = [...wordSet(text)].filter((w) => w.length <= 64)
  const content = words.filter((w) => !STOPWORDS.has(w))
  return (content.length > 0 ? content : words).slice(0, 32)
}

const fnv = (text: string, seed: number): number => {
  let h = seed
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i)
    h = Math.imul(h, 0x01000193)
  }
  return h >>> 0
}
const mix = (v: number): number => {
  let x = v
  x ^= x >>> 16
  x = Math.imul(x, 0x85ebca6b)
  x ^= x >>> 13
  x = Math.imul(x, 0xc2b2ae35)
  x ^= x >>> 16
  return x >>> 0
}
const BANDS = 8
const ROWS = 4
const SEEDS = Array.from({ length: BANDS * ROWS }, (_, i) => mix(0x9e3779b9 + Math.imul(i + 1, 0x632be5ab)) | 1)

/**
 * Locality-sensitive keys for near-duplicate lookup (MinHash, 8 bands of 4): two word sets with
 * Jaccard overlap `J` share at least one key with probability `1 − (1 − J⁴)⁸` — 98.5% at 0.8,
 * 99.98% at 0.9, 40% at 0.5 (candidates are then checked exactly). Keys are scoped: texts of
 * different scopes never share one. Each key is a non-negative safe integer. Give it content words
 * (`contentWords`): stop words, in nearly every text, would make unrelated texts share keys.
 *
 * @since 0.1.0
 * @category Utils
 */
export const nearDuplicateKeys = (scope: string, words: ReadonlySet<string>): ReadonlyArray<number> => {
  if (words.size === 0) return []
  const mins = new Array<number>(SEEDS.length).fill(0xffffffff)
  for (const w of words) {
    const h = fnv(w, 0x811c9dc5)
    for (let i = 0; i < SEEDS.length; i++) {
      const v = mix(Math.imul(h, SEEDS[i]!) ^ SEEDS[i]!)
      if (v < mins[i]!) mins[i] = v
    }
  }
  const keys: Array<number> = []
  for (let b = 0; b < BANDS; b++) {
    const band = `${scope}\u0000${b}:${mins.slice(b * ROWS, (b + 1) * ROWS).join(",")}`
    keys.push((fnv(band, 0x01234567) & 0x1fffff) * 2 ** 32 + fnv(band, 0x811c9dc5))
  }
  return keys
}

/** `2^(-age / halfLife)`. @since 0.1.0 @category Utils */
export const recency = (ageMs: number, halfLifeMs: number): number => 2 ** (-Math.max(0, ageMs) / halfLifeMs)

/**
 * Rank raw BM25 hits (higher raw is better) by the blended score, best first.
 *
 * @since 0.1.0
 * @category Utils
 */
export const rank = (
  hits: ReadonlyArray<{ readonly item: MemoryItem; readonly raw: number }>,
  now: number,
  o: ResolvedOptions,
  limit: number
): Array<SearchHit> => {
  let best = 0
  for (const h of hits) best = Math.max(best, h.raw)
  return hits
    .map((h) => {
      const relevance = best > 0 ? h.raw / best : 0
      const rec = recency(now - h.item.updatedAt, o.halfLifeMs)
      return {
        item: h.item,
        relevance,
        recency: rec,
        score: o.wRelevance * relevance + o.wRecency * rec + (h.item.pinned ? o.pinBoost : 0)
      }
    })
    .sort((a, b) => b.score - a.score || (a.item.id < b.item.id ? -1 : 1))
    .slice(0, limit)
}

const IDENT = /^[^\s\p{Cc}]{1,200}$/u

const ident = (field: string, value: string | null | undefined, redactor: Redactor, required: boolean) => {
  if (value === undefined || value === null) {
    return required
      ? Effect.fail(new InvalidArgument({ message: `${field} is required`, field }))
      : Effect.succeed(null)
  }
  if (!IDENT.test(value)) {
    return Effect.fail(new InvalidArgument({ message: `${field} must be 1–200 visible characters`, field }))
  }
  if (redactor.redactString(value) !== value) {
    return Effect.fail(new InvalidArgument({ message: `${field} looks like it holds a secret`, field }))
  }
  return Effect.succeed(value)
}

/** A checked scope: principal required, agent and session optional. @since 0.1.0 @category Utils */
export const checkScope = (
  scope: MemoryScope,
  o: ResolvedOptions
): Effect.Effect<{ principal: string; agent: string | null; sessionId: string | null }, InvalidArgument> =>
  Effect.all({
    principal: ident("principal", scope.principal, o.redactor, true) as Effect.Effect<string, InvalidArgument>,
    agent: ident("agent", scope.agent, o.redactor, false),
    sessionId: ident("sessionId", scope.sessionId, o.redactor, false)
  })

const checkText = (text: string, o: ResolvedOptions) =>
  typeof text !== "string" || normalize(text).length === 0
    ? Effect.fail(new InvalidArgument({ message: "text must have at least one letter or digit", field: "text" }))
    : text.length > o.maxTextChars
      ? Effect.fail(
          new InvalidArgument({ message: `text is ${text.length} characters, over ${o.maxTextChars}`, field: "text" })
        )
      : Effect.succeed(o.redactor.redactString(text))

const checkBps = (value: number | null | undefined, field: string) =>
  value === undefined || value === null
    ? Effect.succeed(null)
    : Number.isInteger(value) && value >= 0 && value <= 10_000
      ? Effect.succeed(value)
      : Effect.fail(new InvalidArgument({ message: `${field} must be an integer in 0..10000 (basis points)`, field }))

const checkKind = (kind: unknown) =>
  Schema.is(MemoryKind)(kind)
    ? Effect.succeed(kind)
    : Effect.fail(new InvalidArgument({ message: "kind must be fact, preference, procedure or note", field: "kind" }))

/**
 * Check a new item and build it (a fresh id; text redacted). Both adapters call it.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const prepareItem = (input: NewMemory, o: ResolvedOptions): Effect.Effect<MemoryItem, InvalidArgument> =>
  Effect.gen(function* () {
    const scope = yield* checkScope(input, o)
    const kind = yield* checkKind(input.kind)
    const text = yield* checkText(input.text, o)
    const confidenceBps = yield* checkBps(input.confidenceBps, "confidenceBps")
    const now = yield* Clock.currentTimeMillis
    const expiresAt =
      input.expiresAt ?? (input.ttl === undefined ? null : now + Duration.toMillis(Duration.decode(input.ttl)))
    if (expiresAt !== null && !Number.isFinite(expiresAt)) {
      return yield* new InvalidArgument({ message: "expiresAt must be a finite time", field: "expiresAt" })
    }
    return {
      id: yield* ulid,
      ...scope,
      kind,
      text,
      sourceRunId: yield* ident("sourceRunId", input.sourceRunId, o.redactor, false),
      sourceSeq: input.sourceSeq ?? null,
      confidenceBps,
      pinned: input.pinned ?? false,
      createdAt: now,
      updatedAt: now,
      expiresAt
    }
  })

/**
 * Check a new candidate and build it (`pending`). Both adapters call it.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const prepareCandidate = (input: NewCandidate, o: ResolvedOptions): Effect.Effect<Candidate, InvalidArgument> =>
  Effect.gen(function* () {
    const scope = yield* checkScope(input, o)
    const kind = yield* checkKind(input.kind)
    const text = yield* checkText(input.text, o)
    const confidenceBps = yield* checkBps(input.confidenceBps, "confidenceBps")
    return {
      id: yield* ulid,
      ...scope,
      kind,
      text,
      confidenceBps: confidenceBps ?? 0,
      sourceRunId: yield* ident("sourceRunId", input.sourceRunId, o.redactor, false),
      sourceSeq: input.sourceSeq ?? null,
      status: "pending" as const,
      createdAt: yield* Clock.currentTimeMillis,
      decidedAt: null,
      decidedBy: null,
      reason: null,
      itemId: null
    }
  })

/** The item a merge leaves: the existing one, refreshed. @since 0.1.0 @category Utils */
export const merged = (existing: MemoryItem, incoming: MemoryItem): MemoryItem => ({
  ...existing,
  // A restatement that adds words ("… at 9am") supersedes the older text, so nothing said is lost;
  // one that adds nothing keeps the older text.
  text: newWords(incoming.text, existing.text) ? incoming.text : existing.text,
  updatedAt: Math.max(existing.updatedAt, incoming.updatedAt),
  pinned: existing.pinned || incoming.pinned,
  confidenceBps:
    existing.confidenceBps === null
      ? incoming.confidenceBps
      : incoming.confidenceBps === null
        ? existing.confidenceBps
        : Math.max(existing.confidenceBps, incoming.confidenceBps),
  expiresAt:
    existing.expiresAt === null || incoming.expiresAt === null ? null : Math.max(existing.expiresAt, incoming.expiresAt)
})

/** Whether `text` has a word `than` lacks. @since 0.1.0 @category Utils */
export const newWords = (text: string, than: string): boolean => {
  const known = wordSet(than)
  for (const w of wordSet(text)) if (!known.has(w)) return true
  return false
}

/** The item an accepted candidate becomes. @since 0.1.0 @category Utils */
export const candidateItem = (c: Candidate): NewMemory => ({
  principal: c.principal,
  agent: c.agent,
  sessionId: c.sessionId,
  kind: c.kind,
  text: c.text,
  confidenceBps: c.confidenceBps,
  sourceRunId: c.sourceRunId,
  sourceSeq: c.sourceSeq
})

const limitOf = (limit: number | undefined) =>
  limit === undefined
    ? Effect.succeed(5)
    : Number.isInteger(limit) && limit >= 1 && limit <= 50
      ? Effect.succeed(limit)
      : Effect.fail(new InvalidArgument({ message: "limit must be an integer in 1..50", field: "limit" }))

/** The checked parts of a search. @since 0.1.0 @category Utils */
export const prepareSearch = (
  query: SearchQuery,
  o: ResolvedOptions
): Effect.Effect<
  {
    readonly scope: { principal: string; agent: string | null; sessionId: string | null }
    readonly terms: ReadonlyArray<string>
    readonly limit: number
    readonly kinds: ReadonlyArray<MemoryKind> | undefined
  },
  InvalidArgument
> =>
  Effect.gen(function* () {
    const scope = yield* checkScope(query, o)
    if (typeof query.text !== "string" || query.text.length > 10_000) {
      return yield* new InvalidArgument({ message: "text must be at most 10,000 characters", field: "text" })
    }
    const kinds = query.kinds === undefined ? undefined : yield* Effect.forEach(query.kinds, checkKind)
    return { scope, terms: searchTerms(query.text), limit: yield* limitOf(query.limit), kinds }
  })

/** Whether an item is visible to a scope (principal always; agent and session when the item has them). @since 0.1.0 @category Predicates */
export const inScope = (
  item: MemoryItem,
  scope: { readonly principal: string; readonly agent: string | null; readonly sessionId: string | null }
): boolean =>
  item.principal === scope.principal &&
  (item.agent === null || item.agent === scope.agent) &&
  (item.sessionId === null || item.sessionId === scope.sessionId)

// =============================================================================================
// In-memory adapter
// =============================================================================================

/**
 * A real, non-durable store in process memory; search by MiniSearch (BM25+, no stemming).
 *
 * @since 0.1.0
 * @category Constructors
 */
export const makeMemory = (options: StoreOptions = {}): Effect.Effect<Service> =>
  Effect.sync(() => {
    const o = resolveOptions(options)
    const items = new Map<string, MemoryItem>()
    const candidates = new Map<string, Candidate>()
    const index = new MiniSearch<{ id: string; text: string }>({
      fields: ["text"],
      tokenize: (text) => [...wordSet(text)],
      processTerm: (term) => term
    })
    const live = (item: MemoryItem | undefined, now: number) =>
      item !== undefined && (item.expiresAt === null || item.expiresAt > now) ? item : undefined
    const sameScope = (a: MemoryItem, b: MemoryItem) =>
      a.principal === b.principal && a.agent === b.agent && a.sessionId === b.sessionId && a.kind === b.kind

    const saveOne = (item: MemoryItem): SaveResult => {
      const hash = contentHash(item.text)
      const words = wordSet(item.text)
      for (const existing of items.values()) {
        if (!sameScope(existing, item) || live(existing, item.createdAt) === undefined) continue
        if (contentHash(existing.text) === hash || overlap(words, wordSet(existing.text)) >= o.mergeOverlap) {
          const next = merged(existing, item)
          items.set(next.id, next)
          if (next.text !== existing.text) index.replace({ id: next.id, text: next.text })
          return { item: next, outcome: "merged" }
        }
      }
      items.set(item.id, item)
      index.add({ id: item.id, text: item.text })
      return { item, outcome: "created" }
    }
    const remove = (id: string) => {
      if (items.delete(id)) index.discard(id)
    }

    const service: Service = {
      save: (input) => Effect.map(prepareItem(input, o), saveOne),
      saveMany: (inputs) =>
        Effect.map(
          Effect.forEach(inputs, (i) => prepareItem(i, o)),
          (prepared) => prepared.map(saveOne)
        ),
      search: (query) =>
        Effect.gen(function* () {
          const { scope, terms, limit, kinds } = yield* prepareSearch(query, o)
          const now = yield* Clock.currentTimeMillis
          if (terms.length === 0) return []
          const hits = index
            .search(terms.join(" "), {
              combineWith: "OR",
              // Isolation: only the scope's live items are ever scored.
              filter: (r) => {
                const item = live(items.get(r.id as string), now)
                return item !== undefined && inScope(item, scope) && (kinds === undefined || kinds.includes(item.kind))
              }
            })
            .slice(0, Math.max(limit * 4, 20))
            .map((r) => ({ item: items.get(r.id as string)!, raw: r.score }))
          return rank(hits, now, o, limit)
        }),
      get: (principal, id) =>
        Effect.map(Clock.currentTimeMillis, (now) => {
          const item = live(items.get(id), now)
          return item !== undefined && item.principal === principal ? Option.some(item) : Option.none()
        }),
      list: (principal, opts = {}) =>
        Effect.map(Clock.currentTimeMillis, (now) => {
          const out = [...items.values()]
            .filter(
              (i) =>
                i.principal === principal &&
                live(i, now) !== undefined &&
                (opts.kinds === undefined || opts.kinds.includes(i.kind))
            )
            .sort((a, b) => b.updatedAt - a.updatedAt || (a.id < b.id ? 1 : -1))
          return opts.limit === undefined ? out : out.slice(0, Math.max(0, opts.limit))
        }),
      forget: (principal, id) =>
        Effect.suspend(() => {
          const item = items.get(id)
          if (item === undefined || item.principal !== principal) {
            return Effect.fail(new NotFound({ entity: "memory", id }))
          }
          remove(id)
          return Effect.void
        }),
      purgeExpired: Effect.map(Clock.currentTimeMillis, (now) => {
        let n = 0
        for (const item of [...items.values()]) {
          if (live(item, now) === undefined) {
            remove(item.id)
            n++
          }
        }
        return n
      }),
      propose: (input) =>
        Effect.map(prepareCandidate(input, o), (c) => {
          const hash = contentHash(c.text)
          for (const p of candidates.values()) {
            if (
              p.status === "pending" &&
              p.principal === c.principal &&
              p.agent === c.agent &&
              p.sessionId === c.sessionId &&
              p.kind === c.kind &&
              contentHash(p.text) === hash
            ) {
              return p
            }
          }
          candidates.set(c.id, c)
          return c
        }),
      candidates: (filter = {}) =>
        Effect.sync(() => {
          const out = [...candidates.values()].filter(
            (c) =>
              (filter.principal === undefined || c.principal === filter.principal) &&
              (filter.status === undefined || c.status === filter.status)
          )
          return filter.limit === undefined ? out : out.slice(0, Math.max(0, filter.limit))
        }),
      getCandidate: (id) => Effect.sync(() => Option.fromNullable(candidates.get(id))),
      decide: (id, decision) =>
        Effect.gen(function* () {
          const c = candidates.get(id)
          if (c === undefined) return yield* new NotFound({ entity: "candidate", id })
          if (c.status !== "pending") return yield* new Conflict({ message: `candidate ${id} is already ${c.status}` })
          const at = yield* Clock.currentTimeMillis
          const saved = decision.status === "accepted" ? saveOne(yield* prepareItem(candidateItem(c), o)) : undefined
          const next: Candidate = {
            ...c,
            status: decision.status,
            decidedAt: at,
            decidedBy: decision.by,
            reason: decision.reason === undefined ? null : o.redactor.redactString(decision.reason),
            itemId: saved?.item.id ?? null
          }
          candidates.set(id, next)
          return { candidate: next, item: saved?.item ?? null }
        })
    }
    return service
  })

/** The in-memory store as a layer. @since 0.1.0 @category Layers */
export const layerMemory = (options: StoreOptions = {}): Layer.Layer<MemoryStore> =>
  Layer.effect(MemoryStore, makeMemory(options))
