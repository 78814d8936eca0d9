/**
 * A key the model streams in pieces, with a pause between them, reaches neither the journal file nor
 * any subscriber: the agent loop redacts streamed text as it arrives and holds back a possible
 * secret until it is complete, so no stored delta ever carries half of it.
 */
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Caller, Gateway, ScriptedModel } from "@palyra/core"
import { collect, gatewayLayer } from "@palyra/core/testing"
import { Effect, type Layer } from "effect"
import { SqliteJournal } from "../src/index.js"
import { secretsOnDisk } from "./diskBytes.js"

const KEY = "sk-proj-jN4HFNn8Qw2Er5Ty7Ui9Op1As3Df6Gh"

describe("streamed secrets", () => {
  it.live("a key split across two deltas 150 ms apart is stored and streamed only redacted", () =>
    Effect.gen(function* () {
      const filename = join(mkdtempSync(join(tmpdir(), "palyra-stream-secret-")), "journal.db")
      const cut = KEY.indexOf("FNn8")
      const model = ScriptedModel.make([
        {
          text: [`Here is the key: ${KEY.slice(0, cut)}`, `${KEY.slice(cut)} — keep it safe.`],
          delayPerDelta: "150 millis"
        }
      ])
      const events = yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        const started = yield* gateway.startRun(Caller.user("alice"), { text: "show me the key" })
        return yield* collect(started.events)
      }).pipe(
        Effect.provide(
          gatewayLayer({
            model,
            journal: SqliteJournal.layer({ filename }),
            coalesceChars: 1
          }) as Layer.Layer<Gateway.Gateway>
        ),
        Effect.scoped
      )
      const deltas = events.filter((e) => e._tag === "AssistantDelta")
      assert.isAbove(deltas.length, 1)
      const streamed = deltas.map((e) => (e._tag === "AssistantDelta" ? e.text : "")).join("")
      assert.include(streamed, "[REDACTED")
      assert.include(streamed, "keep it safe")
      for (const piece of [KEY, KEY.slice(0, cut), KEY.slice(cut)]) assert.notInclude(JSON.stringify(events), piece)
      assert.deepStrictEqual(secretsOnDisk(filename, [KEY]), [])
    })
  )
})
