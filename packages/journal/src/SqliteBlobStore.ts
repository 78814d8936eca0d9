/**
 * Attachments on SQLite: core's `BlobStore` port on the journal's file (table `blobs`, migration
 * `0008_blobs`). A blob's key is the SHA-256 of its bytes: storing the same bytes again writes
 * nothing (`INSERT OR IGNORE`), and what `get` returns is checked against its digest, so a damaged
 * row is reported rather than sent to a model.
 *
 * Why the journal's file and not files under the data dir: one file to back up and move, writes that
 * are atomic with WAL, the same `secure_delete` and modes as the tape — and no path built from input.
 * Attachments are capped (a few MiB), well within what SQLite stores comfortably in a row.
 *
 * @since 0.1.0
 */
import { BlobStore, type Errors } from "@palyra/core"
import { Clock, Effect, Layer, Option, type Scope } from "effect"
import { type OpenOptions, openDatabase, retryBusy, storageError } from "./internal/database.js"

/** @since 0.1.0 @category Models */
export type Options = OpenOptions

const HEX64 = /^[0-9a-f]{64}$/

/**
 * Open the store on the journal's file (migrating it if needed); closed when the scope closes.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = (options: Options): Effect.Effect<BlobStore.Service, Errors.JournalError, Scope.Scope> =>
  Effect.gen(function* () {
    const db = yield* openDatabase(options, "SqliteBlobStore.open")
    const insert = db.prepare(
      "INSERT OR IGNORE INTO blobs (digest, media_type, size, bytes, created_at) VALUES (?, ?, ?, ?, ?)"
    )
    const select = db.prepare("SELECT digest, media_type, size, bytes FROM blobs WHERE digest = ?")
    // The write waits for the journal's writer asynchronously (see `retryBusy`).
    const busy = retryBusy(options.busyTimeoutMs)
    const service: BlobStore.Service = {
      put: (bytes, mediaType) =>
        Effect.flatMap(Clock.currentTimeMillis, (now) =>
          Effect.try({
            try: () => {
              const digest = BlobStore.digestOf(bytes)
              const result = insert.run(digest, mediaType, bytes.length, Buffer.from(bytes), now)
              return { digest, size: bytes.length, created: result.changes > 0 }
            },
            catch: storageError("SqliteBlobStore.put")
          }).pipe(busy)
        ).pipe(
          Effect.withSpan("SqliteBlobStore.put", { attributes: { size: bytes.length }, captureStackTrace: false })
        ),
      get: (digest) =>
        Effect.try({
          try: () => {
            if (!HEX64.test(digest)) return Option.none()
            const row = select.get(digest) as
              | { digest: string; media_type: string; size: number; bytes: Buffer }
              | undefined
            if (row === undefined) return Option.none()
            const bytes = new Uint8Array(row.bytes.buffer, row.bytes.byteOffset, row.bytes.byteLength)
            if (BlobStore.digestOf(bytes) !== digest) throw new Error(`blob ${digest} does not match its digest`)
            return Option.some({ digest, mediaType: row.media_type, size: row.size, bytes })
          },
          catch: storageError("SqliteBlobStore.get")
        })
    }
    return service
  })

/** The store as core's `BlobStore`. @since 0.1.0 @category Layers */
export const layer = (options: Options): Layer.Layer<BlobStore.BlobStore, Errors.JournalError> =>
  Layer.scoped(BlobStore.BlobStore, make(options))
