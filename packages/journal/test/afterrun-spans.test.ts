/**
 * After-run work stays visible in traces: with a tracer installed, a plain turn's deterministic
 * learning check runs as the after-run hook (`RunHooks.onRunEnd` → `Learning.afterRun`), not as the
 * untraced quick verdict the scheduler takes when nobody reads spans. Real SQLite file.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Caller, Gateway, ScriptedModel } from "@palyra/core"
import { AfterRun } from "@palyra/core/memory"
import { gatewayLayer, recordingTracer } from "@palyra/core/testing"
import { Effect, Layer, Schedule } from "effect"
import { SqliteJournal, SqliteMemoryStore, SqliteTaskQueue } from "../src/index.js"

describe("after-run spans", () => {
  it.live("a plain turn's after-run hook and learning check are spans when a tracer is installed", () =>
    Effect.gen(function* () {
      const dir = mkdtempSync(join(tmpdir(), "palyra-afterrun-spans-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(dir, { recursive: true, force: true })))
      const filename = join(dir, "a.db")
      const { tracer, spans } = recordingTracer()
      const store = yield* SqliteMemoryStore.make({ filename })
      const queue = yield* SqliteTaskQueue.make({ filename })
      const afterRun = AfterRun.make({ store, queue, learning: { extractor: "deterministic" } })
      const names = () => new Set(spans.map((s) => s.name))
      yield* Effect.gen(function* () {
        const gateway = yield* Gateway.Gateway
        yield* gateway.sendMessage(Caller.user("alice"), { key: "a", text: "hello" })
        yield* Effect.sync(names).pipe(
          Effect.repeat({ schedule: Schedule.spaced("10 millis"), until: (n) => n.has("Learning.afterRun") }),
          Effect.timeout("5 seconds")
        )
      }).pipe(
        Effect.provide(
          afterRun.layer.pipe(
            Layer.provideMerge(
              gatewayLayer({
                model: ScriptedModel.make(() => ({ text: "ok" })),
                journal: SqliteJournal.layer({ filename }),
                ...afterRun.kernel({})
              })
            )
          )
        ),
        Effect.withTracer(tracer)
      )
      const seen = names()
      assert.isTrue(seen.has("AgentLoop.run"))
      assert.isTrue(seen.has("RunHooks.onRunEnd"))
      assert.isTrue(seen.has("Learning.afterRun"))
    }).pipe(Effect.scoped)
  )
})
