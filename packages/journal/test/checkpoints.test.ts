import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { type Ids, Records } from "@palyra/core"
import { Effect, Option } from "effect"
import { SqliteJournal } from "../src/index.js"
import { secretsOnDisk } from "./diskBytes.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-checkpoints-"))
const SID = "01KA000000000000000000000C" as Ids.SessionId
const CID = "01KA00000000000000000000CP"
const SECRETS = ["ghp_q7Z0xv1nW8cR2yT5bK9mL3pA6sD4fG0hJ8kE", "sk-proj-Yk4Lm9Np2Qr7St1Uv6Wx3Yz8Ab5Cd0Ef"]

describe("checkpoints on disk", () => {
  it.live("a checkpoint's summary and state are redacted before they reach the file, and survive a reopen", () =>
    Effect.gen(function* () {
      const filename = join(dir, "checkpoints.db")
      const checkpoint = {
        id: CID,
        sessionId: SID,
        fromSeq: 1,
        toSeq: 1,
        summary: `## Facts & identifiers\ntoken ${SECRETS[0]}`,
        state: { version: 1, pinned: [{ seq: 1, author: "tool:session.note", text: `key ${SECRETS[1]}` }] },
        createdAt: 1_700_000_000_000
      }
      yield* Effect.scoped(
        Effect.gen(function* () {
          const j = yield* SqliteJournal.make({ filename })
          yield* j.createSession(Records.makeSession({ id: SID, principal: "alice" }))
          yield* j.append(SID, [{ _tag: "SessionNote", sessionId: SID, runId: null, at: 1, author: "t", text: "n" }], {
            createCheckpoint: checkpoint
          })
          assert.deepStrictEqual(secretsOnDisk(filename, SECRETS), [])
        })
      )
      yield* Effect.scoped(
        Effect.gen(function* () {
          const j = yield* SqliteJournal.make({ filename })
          const all = yield* j.listCheckpoints(SID)
          assert.strictEqual(all.length, 1)
          const stored = all[0]!
          assert.strictEqual(stored.id, CID)
          assert.include(stored.summary, "[REDACTED:")
          assert.notInclude(stored.summary, SECRETS[0]!)
          const pinned = (stored.state as { pinned: Array<{ text: string }> }).pinned
          assert.strictEqual(pinned.length, 1)
          assert.notInclude(pinned[0]!.text, SECRETS[1]!)
          assert.deepStrictEqual(
            Option.map(yield* j.getCheckpoint(CID), (c) => c.toSeq),
            Option.some(1)
          )
        })
      )
    })
  )
})
