/**
 * Memory on SQLite: core's `MemoryStore` port on the journal's file (tables `memory_items`,
 * `memory_fts`, `memory_candidates`, migration `0006_tasks_memory`).
 *
 * - **Search** is FTS5 with BM25 (porter stemming, diacritics folded), blended with recency by
 *   core's `MemoryStore.rank`. The user's text never reaches FTS5's query syntax: it is reduced to
 *   words (`MemoryStore.searchTerms`), each quoted.
 * - **Isolation** is in the query: every read has `principal = ?` in its `WHERE`, so a search for
 *   principal A never returns principal B's items. Below that, the index itself is per principal:
 *   every word is indexed prefixed with a mark derived from its principal (a contentless FTS5
 *   table), so a lookup reads only that principal's postings — its cost follows the principal's
 *   items, not the store's, and another principal's words do not even match.
 * - **Dedupe**: the same normalized text (a SHA-256 in `hash`), or word overlap of at least
 *   `mergeOverlap` with an item of the same scope and kind, merges. Overlapping items are found by
 *   MinHash band keys (`MemoryStore.nearDuplicateKeys`, table `memory_lsh`: a few index lookups,
 *   whatever the store's size; at 0.8 overlap a near-duplicate is found 98.5% of the time, above it
 *   almost always) and checked exactly.
 * - **Forgetting** deletes the row, and FTS5's `secure-delete` removes its tokens from the index;
 *   `secure_delete` overwrites the freed pages.
 * - Texts are redacted before they are written.
 *
 * @since 0.1.0
 */
import { Canonical, Errors, Redaction } from "@palyra/core"
import { MemoryStore } from "@palyra/core/memory"
import Database from "better-sqlite3"
import { Clock, Effect, Layer, Option, type Scope } from "effect"
import { type OpenOptions, openDatabase, retryBusy, storageError } from "./internal/database.js"

/** @since 0.1.0 @category Models */
export interface Options extends OpenOptions, Omit<MemoryStore.StoreOptions, "redactor"> {
  /** Redaction rules for texts, added to the defaults. `false` turns redaction off. */
  readonly redaction?: Redaction.RedactionOptions | false | undefined
}

type Row = Record<string, unknown>

const toItem = (r: Row): MemoryStore.MemoryItem => ({
  id: r.id as string,
  principal: r.principal as string,
  agent: (r.agent as string | null) ?? null,
  sessionId: (r.session_id as string | null) ?? null,
  kind: r.kind as MemoryStore.MemoryKind,
  text: r.text as string,
  sourceRunId: (r.source_run_id as string | null) ?? null,
  sourceSeq: (r.source_seq as number | null) ?? null,
  confidenceBps: (r.confidence_bps as number | null) ?? null,
  pinned: r.pinned === 1,
  createdAt: r.created_at as number,
  updatedAt: r.updated_at as number,
  expiresAt: (r.expires_at as number | null) ?? null
})

const toCandidate = (r: Row): MemoryStore.Candidate => ({
  id: r.id as string,
  principal: r.principal as string,
  agent: (r.agent as string | null) ?? null,
  sessionId: (r.session_id as string | null) ?? null,
  kind: r.kind as MemoryStore.MemoryKind,
  text: r.text as string,
  confidenceBps: r.confidence_bps as number,
  sourceRunId: (r.source_run_id as string | null) ?? null,
  sourceSeq: (r.source_seq as number | null) ?? null,
  status: r.status as MemoryStore.CandidateStatus,
  createdAt: r.created_at as number,
  decidedAt: (r.decided_at as number | null) ?? null,
  decidedBy: (r.decided_by as string | null) ?? null,
  reason: (r.reason as string | null) ?? null,
  itemId: (r.item_id as string | null) ?? null
})

/**
 * The principal's mark: 12 letters from a digest of the principal. Every indexed word is prefixed
 * with it, so FTS5 reads only the principal's postings. (Letters only: mark and word stay one token.)
 */
const marks = new Map<string, string>()
const markOf = (principal: string) => {
  let mark = marks.get(principal)
  if (mark === undefined) {
    mark = Canonical.sha256(principal)
      .slice(0, 12)
      .replace(/[0-9a-f]/g, (h) => String.fromCharCode(97 + Number.parseInt(h, 16)))
    // A bounded memo: ingest computes the mark of every item's principal.
    if (marks.size >= 10_000) marks.clear()
    marks.set(principal, mark)
  }
  return mark
}

/** What the index holds for an item: each word of its normalized text (repeats kept), marked. */
const indexed = (principal: string, normalized: string) => {
  const mark = markOf(principal)
  return normalized
    .split(" ")
    .filter((w) => w.length > 0 && w.length <= 64)
    .map((w) => mark + w)
    .join(" ")
}

/** An FTS5 query for any (or all) of the words, in the principal's postings. Words are letters/digits only. */
const matchOf = (principal: string, terms: ReadonlyArray<string>, join: "OR" | "AND" = "OR") => {
  const mark = markOf(principal)
  return `terms : (${terms.map((t) => `"${mark}${t.replace(/"/g, '""')}"`).join(` ${join} `)})`
}

/**
 * A word held by more of the principal's items than this is "common" for the principal. Ranking
 * every item that holds any query word costs in proportion to how many there are: common words are
 * dropped from a query that also has selective ones (a dynamic stop-word list: they weigh least in
 * BM25 anyway), and a query of common words only looks for items holding all of them first.
 */
const COMMON = 2_000

/**
 * Open the store on the journal's file (migrating it if needed); closed when the scope closes.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = (options: Options): Effect.Effect<MemoryStore.Service, Errors.JournalError, Scope.Scope> =>
  Effect.gen(function* () {
    const db = yield* openDatabase(options, "SqliteMemoryStore.open")
    // A page cache of up to 64 MiB for this connection (SQLite's default is 2 MiB): ingest probes and
    // extends several B-trees at random places (items, the dedupe keys, FTS5), which then stay cached.
    db.pragma("cache_size = -65536")
    const redactor = options.redaction === false ? Redaction.none : Redaction.make(options.redaction || {})
    const o = MemoryStore.resolveOptions({ ...options, redactor })

    const st = {
      insert: db.prepare(
        `INSERT INTO memory_items (id, principal, agent, session_id, kind, text, hash, source_run_id, source_seq,
          confidence_bps, pinned, created_at, updated_at, expires_at)
         VALUES (@id, @principal, @agent, @sessionId, @kind, @text, @hash, @sourceRunId, @sourceSeq,
          @confidenceBps, @pinned, @createdAt, @updatedAt, @expiresAt)`
      ),
      index: db.prepare("INSERT INTO memory_fts (rowid, terms) VALUES (?, ?)"),
      unindex: db.prepare("DELETE FROM memory_fts WHERE rowid = ?"),
      retext: db.prepare("UPDATE memory_items SET text = @text, hash = @hash WHERE id = @id"),
      merge: db.prepare(
        `UPDATE memory_items SET updated_at = @updatedAt, pinned = @pinned, confidence_bps = @confidenceBps,
          expires_at = @expiresAt WHERE id = @id`
      ),
      sameHash: db.prepare(
        `SELECT * FROM memory_items WHERE principal = @principal AND hash = @hash AND agent IS @agent
           AND session_id IS @sessionId AND kind = @kind AND (expires_at IS NULL OR expires_at > @now) LIMIT 1`
      ),
      lshInsert: db.prepare("INSERT OR IGNORE INTO memory_lsh (key, n) VALUES (?, ?)"),
      // Near-duplicate candidates in two steps: the band keys' items (a few primary-key probes; most
      // inserts find none), then each one's row in the same scope. One join of both is several times
      // slower per insert (measured by bench/memory), and it runs for every item saved.
      similarKeys: db
        .prepare(`SELECT DISTINCT n FROM memory_lsh WHERE key IN (${Array.from({ length: 8 }, () => "?").join(", ")})`)
        .pluck(),
      similarItem: db.prepare(
        `SELECT * FROM memory_items WHERE n = ? AND principal = ? AND agent IS ? AND session_id IS ? AND kind = ?
           AND (expires_at IS NULL OR expires_at > ?)`
      ),
      get: db.prepare(
        "SELECT * FROM memory_items WHERE id = ? AND principal = ? AND (expires_at IS NULL OR expires_at > ?)"
      ),
      // How many items hold a word, counted up to just past COMMON (bounded cost).
      frequency: db.prepare(
        `SELECT count(*) AS n FROM (SELECT 1 FROM memory_fts WHERE memory_fts MATCH ? LIMIT ${COMMON + 1})`
      ),
      // Whether the principal has any item at all (one probe of `memory_items_principal`).
      anyOf: db.prepare("SELECT 1 FROM memory_items WHERE principal = ? LIMIT 1").pluck(),
      forget: db.prepare("DELETE FROM memory_items WHERE id = ? AND principal = ?"),
      purge: db.prepare("DELETE FROM memory_items WHERE expires_at IS NOT NULL AND expires_at <= ?"),
      insertCandidate: db.prepare(
        `INSERT INTO memory_candidates (id, principal, agent, session_id, kind, text, hash, confidence_bps, source_run_id,
          source_seq, status, created_at, decided_at, decided_by, reason, item_id)
         VALUES (@id, @principal, @agent, @sessionId, @kind, @text, @hash, @confidenceBps, @sourceRunId, @sourceSeq,
          @status, @createdAt, @decidedAt, @decidedBy, @reason, @itemId)`
      ),
      pendingSame: db.prepare(
        `SELECT * FROM memory_candidates WHERE principal = @principal AND hash = @hash AND status = 'pending'
           AND agent IS @agent AND session_id IS @sessionId AND kind = @kind LIMIT 1`
      ),
      candidate: db.prepare("SELECT * FROM memory_candidates WHERE id = ?"),
      decide: db.prepare(
        `UPDATE memory_candidates SET status = @status, decided_at = @decidedAt, decided_by = @decidedBy,
          reason = @reason, item_id = @itemId WHERE id = @id AND status = 'pending'`
      )
    }

    /** The two search statements for a number of kinds, prepared once. */
    const searchCache = new Map<number, { readonly top: Database.Statement; readonly full: Database.Statement }>()
    const searchStatements = (kinds: number) => {
      const cached = searchCache.get(kinds)
      if (cached !== undefined) return cached
      const inScope = `m.principal = @principal AND (m.agent IS NULL OR m.agent = @agent)
        AND (m.session_id IS NULL OR m.session_id = @sessionId) AND (m.expires_at IS NULL OR m.expires_at > @now)${
          kinds === 0 ? "" : ` AND m.kind IN (${Array.from({ length: kinds }, (_, i) => `@k${i}`).join(", ")})`
        }`
      const statements = {
        top: db.prepare(
          `SELECT m.*, f.raw AS raw, coalesce(${inScope}, 0) AS in_scope
           FROM (SELECT rowid, -bm25(memory_fts) AS raw FROM memory_fts WHERE memory_fts MATCH @match ORDER BY rank LIMIT @wanted) AS f
           LEFT JOIN memory_items m ON m.n = f.rowid ORDER BY f.raw DESC`
        ),
        full: db.prepare(
          `SELECT m.*, -bm25(memory_fts) AS raw FROM memory_fts JOIN memory_items m ON m.n = memory_fts.rowid
           WHERE memory_fts MATCH @match AND ${inScope} ORDER BY bm25(memory_fts) LIMIT @wanted`
        )
      }
      searchCache.set(kinds, statements)
      return statements
    }

    const sync = <A>(method: string, f: () => A) => Effect.try({ try: f, catch: storageError(method) })
    // Writes wait for the journal's writer asynchronously (see `retryBusy`), never in SQLite's busy handler.
    const busy = retryBusy(options.busyTimeoutMs)
    const immediate = <A>(method: string, f: () => A) =>
      busy(Effect.try({ try: () => db.transaction(f).immediate(), catch: storageError(method) }))

    /** Save or merge one prepared item. Call inside a transaction. */
    const saveOne = (item: MemoryStore.MemoryItem): MemoryStore.SaveResult => {
      // The text normalized once (MemoryStore.contentHash and wordSet normalize it the same way).
      const normalized = MemoryStore.normalize(item.text)
      const hash = Canonical.sha256(normalized)
      const scope = { principal: item.principal, agent: item.agent, sessionId: item.sessionId, kind: item.kind }
      const now = item.createdAt
      let existing = st.sameHash.get({ ...scope, hash, now }) as Row | undefined
      const words = new Set(normalized.split(" ").filter(Boolean))
      const keys = MemoryStore.nearDuplicateKeys(
        `${item.principal}\u0000${item.agent ?? ""}\u0000${item.sessionId ?? ""}\u0000${item.kind}`,
        MemoryStore.contentWords(item.text)
      )
      if (existing === undefined && keys.length > 0) {
        for (const n of st.similarKeys.all(...keys) as Array<number>) {
          const row = st.similarItem.get(n, item.principal, item.agent, item.sessionId, item.kind, now) as
            | Row
            | undefined
          if (
            row !== undefined &&
            MemoryStore.overlap(words, MemoryStore.wordSet(row.text as string)) >= o.mergeOverlap
          ) {
            existing = row
            break
          }
        }
      }
      if (existing !== undefined) {
        const next = MemoryStore.merged(toItem(existing), item)
        if (next.text !== existing.text) {
          // The restatement's text replaces the older one: index it (stale LSH keys only cost a lookup).
          const n = existing.n as number
          st.retext.run({ id: next.id, text: next.text, hash })
          st.unindex.run(n)
          st.index.run(n, indexed(item.principal, normalized))
          for (const key of keys) st.lshInsert.run(key, n)
        }
        st.merge.run({ ...next, pinned: next.pinned ? 1 : 0 })
        return { item: next, outcome: "merged" }
      }
      const n = st.insert.run({ ...item, pinned: item.pinned ? 1 : 0, hash }).lastInsertRowid
      st.index.run(n, indexed(item.principal, normalized))
      for (const key of keys) st.lshInsert.run(key, n)
      return { item, outcome: "created" }
    }

    const search: MemoryStore.Service["search"] = (query) =>
      Effect.gen(function* () {
        const { scope, terms, limit, kinds } = yield* MemoryStore.prepareSearch(query, o)
        if (terms.length === 0) return []
        const now = yield* Clock.currentTimeMillis
        const rows = yield* sync("search", () => {
          // A principal without items (the usual case: memory is searched before every model call)
          // is answered by one index probe instead of FTS5 lookups. Read from the file each time, so
          // what another connection or process saved is seen at once, never a stale "empty".
          if (st.anyOf.get(scope.principal) === undefined) return []
          const wanted = Math.max(limit * 4, 20)
          const params: Record<string, unknown> = {
            principal: scope.principal,
            agent: scope.agent,
            sessionId: scope.sessionId,
            now,
            wanted
          }
          for (const [i, k] of (kinds ?? []).entries()) params[`k${i}`] = k
          const { top, full } = searchStatements(kinds?.length ?? 0)
          // The best `wanted` matches by BM25 are joined to their rows only then (FTS5 orders by rank
          // itself). If the scope's filters (agent, session, expiry, kinds) dropped some of a full page,
          // the query that filters every match decides instead: the same rows either way.
          const run = (match: string) => {
            const best = top.all({ ...params, match }) as Array<Row>
            const kept = best.filter((r) => r.in_scope === 1)
            return kept.length === best.length || best.length < wanted
              ? kept
              : (full.all({ ...params, match }) as Array<Row>)
          }
          if (terms.length === 1) return run(matchOf(scope.principal, terms))
          const counted = terms.map((t) => ({
            t,
            n: (st.frequency.get(matchOf(scope.principal, [t])) as { n: number }).n
          }))
          const present = counted.filter((c) => c.n > 0)
          if (present.length === 0) return []
          const selective = present.filter((c) => c.n <= COMMON).map((c) => c.t)
          if (selective.length > 0) return run(matchOf(scope.principal, selective))
          const all = present.map((c) => c.t)
          const together = run(matchOf(scope.principal, all, "AND"))
          return together.length >= limit ? together : run(matchOf(scope.principal, all))
        })
        return MemoryStore.rank(
          rows.map((r) => ({ item: toItem(r), raw: r.raw as number })),
          now,
          o,
          limit
        )
      })

    const service: MemoryStore.Service = {
      save: (input) =>
        Effect.flatMap(MemoryStore.prepareItem(input, o), (item) => immediate("save", () => saveOne(item))),
      saveMany: (inputs) =>
        Effect.flatMap(
          Effect.forEach(inputs, (i) => MemoryStore.prepareItem(i, o)),
          (items) => immediate("saveMany", () => items.map(saveOne))
        ),
      search,
      get: (principal, id) =>
        Effect.flatMap(Clock.currentTimeMillis, (now) =>
          sync("get", () => Option.map(Option.fromNullable(st.get.get(id, principal, now) as Row | undefined), toItem))
        ),
      list: (principal, opts = {}) =>
        Effect.flatMap(Clock.currentTimeMillis, (now) =>
          sync("list", () => {
            const kinds = opts.kinds
            const kindClause = kinds === undefined ? "" : `AND kind IN (${kinds.map(() => "?").join(", ")})`
            return (
              db
                .prepare(
                  `SELECT * FROM memory_items WHERE principal = ? AND (expires_at IS NULL OR expires_at > ?) ${kindClause}
                   ORDER BY updated_at DESC, id DESC LIMIT ?`
                )
                .all(
                  principal,
                  now,
                  ...(kinds ?? []),
                  opts.limit === undefined ? -1 : Math.max(0, opts.limit)
                ) as Array<Row>
            ).map(toItem)
          })
        ),
      forget: (principal, id) =>
        Effect.flatMap(busy(sync("forget", () => st.forget.run(id, principal).changes)), (changes) =>
          changes === 0 ? Effect.fail(new Errors.NotFound({ entity: "memory", id })) : Effect.void
        ),
      purgeExpired: Effect.flatMap(Clock.currentTimeMillis, (now) =>
        immediate("purgeExpired", () => st.purge.run(now).changes)
      ),
      propose: (input) =>
        Effect.flatMap(MemoryStore.prepareCandidate(input, o), (c) =>
          immediate("propose", () => {
            const hash = MemoryStore.contentHash(c.text)
            const same = st.pendingSame.get({ ...c, hash }) as Row | undefined
            if (same !== undefined) return toCandidate(same)
            st.insertCandidate.run({ ...c, hash })
            return c
          })
        ),
      candidates: (filter = {}) =>
        sync("candidates", () => {
          const where: Array<string> = []
          const args: Array<unknown> = []
          if (filter.principal !== undefined) {
            where.push("principal = ?")
            args.push(filter.principal)
          }
          if (filter.status !== undefined) {
            where.push("status = ?")
            args.push(filter.status)
          }
          args.push(filter.limit === undefined ? -1 : Math.max(0, filter.limit))
          const clause = where.length > 0 ? `WHERE ${where.join(" AND ")}` : ""
          return (
            db.prepare(`SELECT * FROM memory_candidates ${clause} ORDER BY id LIMIT ?`).all(...args) as Array<Row>
          ).map(toCandidate)
        }),
      getCandidate: (id) =>
        sync("getCandidate", () =>
          Option.map(Option.fromNullable(st.candidate.get(id) as Row | undefined), toCandidate)
        ),
      decide: (id, decision) =>
        Effect.gen(function* () {
          const found = yield* sync("decide", () => st.candidate.get(id) as Row | undefined)
          if (found === undefined) return yield* new Errors.NotFound({ entity: "candidate", id })
          const candidate = toCandidate(found)
          const item =
            decision.status === "accepted"
              ? yield* MemoryStore.prepareItem(MemoryStore.candidateItem(candidate), o)
              : undefined
          const at = yield* Clock.currentTimeMillis
          const reason = decision.reason === undefined ? null : redactor.redactString(decision.reason)
          const result = yield* immediate("decide", () => {
            const current = toCandidate(st.candidate.get(id) as Row)
            if (current.status !== "pending") return undefined
            const saved = item === undefined ? undefined : saveOne(item)
            const next: MemoryStore.Candidate = {
              ...current,
              status: decision.status,
              decidedAt: at,
              decidedBy: decision.by,
              reason,
              itemId: saved?.item.id ?? null
            }
            st.decide.run(next)
            return { candidate: next, item: saved?.item ?? null }
          })
          if (result === undefined) {
            return yield* new Errors.Conflict({ message: `candidate ${id} was already decided` })
          }
          return result
        })
    }
    return service
  }).pipe(Effect.withSpan("SqliteMemoryStore.open", { attributes: { filename: options.filename } }))

/** The store as core's `MemoryStore`. @since 0.1.0 @category Layers */
export const layer = (options: Options): Layer.Layer<MemoryStore.MemoryStore, Errors.JournalError> =>
  Layer.scoped(MemoryStore.MemoryStore, make(options))

/** What a journal's file holds of memory and learning. @since 0.1.0 @category Models */
export interface Counts {
  /** Memory items (every principal's, expired ones not yet purged included). */
  readonly items: number
  /** Learning candidates waiting for review. */
  readonly pendingCandidates: number
}

/**
 * Count memory items and pending candidates of a journal's file, read-only (no migration, no
 * write): `palyra doctor` uses it beside a running palyrad. A journal from before memory existed
 * counts zero.
 *
 * @since 0.1.0
 * @category Utils
 */
export const counts = (filename: string): Effect.Effect<Counts, Errors.JournalError> =>
  Effect.acquireUseRelease(
    Effect.try({
      try: () => new Database(filename, { readonly: true, fileMustExist: true }),
      catch: storageError("SqliteMemoryStore.counts")
    }),
    (db) =>
      Effect.try({
        try: () => {
          const has = (table: string) =>
            db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?").get(table) !== undefined
          const count = (sql: string) => (db.prepare(sql).pluck().get() as number | undefined) ?? 0
          return {
            items: has("memory_items") ? count("SELECT count(*) FROM memory_items") : 0,
            pendingCandidates: has("memory_candidates")
              ? count("SELECT count(*) FROM memory_candidates WHERE status = 'pending'")
              : 0
          }
        },
        catch: storageError("SqliteMemoryStore.counts")
      }),
    (db) => Effect.sync(() => db.close())
  ).pipe(Effect.withSpan("SqliteMemoryStore.counts"))
