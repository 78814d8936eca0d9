/**
 * Memory vectors on the journal's SQLite file (table `memory_vectors`, migration 0009): core's
 * `Embeddings.VectorIndex`, searched by brute force — every vector of the principal (and model)
 * is read and compared by cosine, which is fine for thousands of items per principal. A vector is
 * deleted with its item (foreign key, `ON DELETE CASCADE`), so forgetting and expiry need nothing
 * more.
 *
 * ```ts
 * const store = Embeddings.withVectors(yield* SqliteMemoryStore.make({ filename }), {
 *   embedder,
 *   index: yield* SqliteVectorIndex.make({ filename })
 * })
 * ```
 *
 * @since 0.1.0
 */
import type { Errors } from "@palyra/core"
import { Embeddings } from "@palyra/core/memory"
import { Effect, type Scope } from "effect"
import { type OpenOptions, openDatabase, retryBusy, storageError } from "./internal/database.js"

/** @since 0.1.0 @category Models */
export type Options = OpenOptions

type Row = { item_id: string; agent: string | null; session_id: string | null; vector: Buffer; dim: number }

const toBlob = (v: Float32Array) => Buffer.from(v.buffer, v.byteOffset, v.byteLength)
const fromBlob = (b: Buffer, dim: number) =>
  new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + dim * Float32Array.BYTES_PER_ELEMENT))

/**
 * Open the index on the journal's file (migrating it if needed); closed when the scope closes.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = (options: Options): Effect.Effect<Embeddings.VectorIndex, Errors.JournalError, Scope.Scope> =>
  Effect.gen(function* () {
    const db = yield* openDatabase(options, "SqliteVectorIndex.open")
    const st = {
      put: db.prepare(
        `INSERT INTO memory_vectors (item_id, model, principal, agent, session_id, dim, vector)
         VALUES (@id, @model, @principal, @agent, @sessionId, @dim, @vector)
         ON CONFLICT (item_id, model) DO UPDATE SET vector = excluded.vector, dim = excluded.dim`
      ),
      remove: db.prepare("DELETE FROM memory_vectors WHERE item_id = ? AND principal = ?"),
      scan: db.prepare(
        `SELECT item_id, agent, session_id, dim, vector FROM memory_vectors
         WHERE principal = @principal AND model = @model
           AND (agent IS NULL OR agent = @agent) AND (session_id IS NULL OR session_id = @sessionId)`
      )
    }
    const sync = <A>(method: string, f: () => A) => Effect.try({ try: f, catch: storageError(method) })
    // Writes wait for the journal's writer asynchronously (see `retryBusy`), never in SQLite's busy handler.
    const busy = retryBusy(options.busyTimeoutMs)
    return {
      put: (entries) =>
        busy(
          sync("putVectors", () =>
            db
              .transaction(() => {
                for (const e of entries) {
                  st.put.run({
                    id: e.id,
                    model: e.model,
                    principal: e.principal,
                    agent: e.agent,
                    sessionId: e.sessionId,
                    dim: e.vector.length,
                    vector: toBlob(e.vector)
                  })
                }
              })
              .immediate()
          )
        ),
      remove: (principal, id) => Effect.asVoid(busy(sync("removeVector", () => st.remove.run(id, principal)))),
      nearest: (scope, vector, k) =>
        sync("nearestVectors", () => {
          const rows = st.scan.all({
            principal: scope.principal,
            model: scope.model,
            agent: scope.agent ?? null,
            sessionId: scope.sessionId ?? null
          }) as Array<Row>
          return Embeddings.topK(
            rows.map((r) => ({ id: r.item_id, vector: fromBlob(r.vector, r.dim) })),
            vector,
            k
          )
        }).pipe(Effect.withSpan("SqliteVectorIndex.nearest", { attributes: { model: scope.model } }))
    }
  })
