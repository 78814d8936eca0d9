import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Metrics, Records, type TapeEvent } from "@palyra/core"
import { Effect, Exit, Metric, Scope } from "effect"
import { SqliteJournal } from "../src/index.js"

const dir = mkdtempSync(join(tmpdir(), "palyra-append-metrics-"))
const session = "01KA0000000000000000000042" as TapeEvent.TapeEvent["sessionId"]
const message = (i: number): TapeEvent.NewTapeEvent => ({
  _tag: "UserMessage",
  sessionId: session,
  runId: null,
  at: 1_700_000_000_000 + i,
  text: `message ${i}`
})

// The journal records each group commit's latency and size with the metric labels of the runtime it
// was opened in (what a daemon's tags would be), as plain updates from the writer's callback.
const series = Effect.all({
  batches: Metric.value(Metric.tagged(Metrics.journalBatchSize, "suite", "append-metrics")),
  latency: Metric.value(Metric.tagged(Metrics.journalAppendLatency, "suite", "append-metrics")),
  unlabelled: Metric.value(Metrics.journalBatchSize)
})

describe("journal append metrics", () => {
  for (const writer of ["worker", "inline"] as const)
    it.effect(`each commit moves the commit histograms once, in the opening runtime's labels (${writer} writer)`, () =>
      Effect.gen(function* () {
        const scope = yield* Scope.make()
        const j = yield* SqliteJournal.make({ filename: join(dir, `${writer}.db`), writer }).pipe(
          Effect.tagMetrics("suite", "append-metrics"),
          Scope.extend(scope)
        )
        yield* j.createSession(Records.makeSession({ id: session, principal: "p" }))
        const before = yield* series
        // Two commits of one append each (each append waits for its commit; the size is in appends).
        yield* j.append(session, [message(1)])
        yield* j.append(session, [message(2), message(3), message(4)])
        const after = yield* series
        expect(after.batches.count - before.batches.count).toBe(2)
        expect(after.batches.sum - before.batches.sum).toBe(2)
        expect(after.latency.count - before.latency.count).toBe(2)
        // Nothing went to the series without the opening runtime's labels.
        expect(after.unlabelled.count).toBe(before.unlabelled.count)
        yield* Scope.close(scope, Exit.void)
      })
    )
})
