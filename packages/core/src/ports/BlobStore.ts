/**
 * The `BlobStore` port: content-addressed bytes (attachments) kept outside the tape. A blob's key
 * is the SHA-256 of its bytes, so storing the same bytes twice keeps one copy, and a tape event that
 * names a digest pins exactly those bytes (the tape's hash chain covers the digest).
 *
 * `memory()` is an in-memory store (the kernel's default and for tests); `@palyra/journal`'s
 * `SqliteBlobStore` keeps blobs in the journal's file.
 *
 * @since 0.1.0
 */
import { createHash } from "node:crypto"
import { Context, Effect, Layer, Option } from "effect"
import type { JournalError } from "../domain/Errors.js"

/** @since 0.1.0 @category Models */
export interface Blob {
  readonly digest: string
  readonly mediaType: string
  readonly size: number
  readonly bytes: Uint8Array
}

/** @since 0.1.0 @category Models */
export interface Stored {
  readonly digest: string
  readonly size: number
  /** `false` when the store already held these bytes (nothing new was written). */
  readonly created: boolean
}

/** @since 0.1.0 @category Models */
export interface Service {
  /** Keep `bytes` under their digest (idempotent). */
  readonly put: (bytes: Uint8Array, mediaType: string) => Effect.Effect<Stored, JournalError>
  readonly get: (digest: string) => Effect.Effect<Option.Option<Blob>, JournalError>
}

/** @since 0.1.0 @category Tags */
export class BlobStore extends Context.Tag("@palyra/core/BlobStore")<BlobStore, Service>() {}

/** The SHA-256 of bytes, in lower-case hex (a blob's key). @since 0.1.0 @category Utils */
export const digestOf = (bytes: Uint8Array): string => createHash("sha256").update(bytes).digest("hex")

/**
 * An in-memory store: blobs live as long as the process.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const memory = (): Service => {
  const blobs = new Map<string, Blob>()
  return {
    put: (bytes, mediaType) =>
      Effect.sync(() => {
        const digest = digestOf(bytes)
        const created = !blobs.has(digest)
        if (created) blobs.set(digest, { digest, mediaType, size: bytes.length, bytes: Uint8Array.from(bytes) })
        return { digest, size: bytes.length, created }
      }),
    get: (digest) => Effect.sync(() => Option.fromNullable(blobs.get(digest)))
  }
}

/** @since 0.1.0 @category Layers */
export const layerMemory: Layer.Layer<BlobStore> = Layer.sync(BlobStore, memory)
