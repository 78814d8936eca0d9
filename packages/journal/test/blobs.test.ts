import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { BlobStore } from "@palyra/core"
import Database from "better-sqlite3"
import { Effect, Option } from "effect"
import { SqliteBlobStore, SqliteJournal } from "../src/index.js"

const bytes = (s: string) => new TextEncoder().encode(s)

describe("SqliteBlobStore (migration 0008)", () => {
  it.live("dedupes by digest, survives a reopen beside the journal, and reports a damaged row", () =>
    Effect.gen(function* () {
      const filename = join(mkdtempSync(join(tmpdir(), "palyra-blobs-")), "journal.db")
      const digest = yield* Effect.scoped(
        Effect.gen(function* () {
          yield* SqliteJournal.make({ filename })
          const store = yield* SqliteBlobStore.make({ filename })
          const a = yield* store.put(bytes("hello attachments"), "text/plain")
          const b = yield* store.put(bytes("hello attachments"), "text/markdown")
          assert.strictEqual(a.digest, BlobStore.digestOf(bytes("hello attachments")))
          assert.deepStrictEqual([a.created, b.created], [true, false])
          assert.isTrue(Option.isNone(yield* store.get("0".repeat(64))))
          assert.isTrue(Option.isNone(yield* store.get("../../etc/passwd")))
          return a.digest
        })
      )
      const db = new Database(filename)
      assert.deepStrictEqual(db.prepare("SELECT count(*) AS n FROM blobs").get(), { n: 1 })
      db.close()
      // Reopened (this connection migrates nothing new): the bytes and the first media type are there.
      const got = yield* Effect.scoped(Effect.flatMap(SqliteBlobStore.make({ filename }), (s) => s.get(digest)))
      const blob = Option.getOrThrow(got)
      assert.strictEqual(new TextDecoder().decode(blob.bytes), "hello attachments")
      assert.strictEqual(blob.mediaType, "text/plain")
      // A row whose bytes no longer match their digest is an error, never content.
      const attacker = new Database(filename)
      attacker.prepare("UPDATE blobs SET bytes = ? WHERE digest = ?").run(Buffer.from("tampered"), digest)
      attacker.close()
      const damaged = yield* Effect.scoped(
        Effect.flatMap(SqliteBlobStore.make({ filename }), (s) => Effect.flip(s.get(digest)))
      )
      assert.strictEqual(damaged._tag, "JournalError")
      assert.match(damaged.message, /does not match its digest/)
    })
  )
})
