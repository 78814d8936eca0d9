/**
 * `[memory]`, `[learning]`, `[watchdog]` and `[tasks]` as `AfterRun` options: the background queue
 * and the memory store open their own connections to the journal's file (WAL, `busy_timeout`, every
 * write a `BEGIN IMMEDIATE` transaction, so they wait for the journal's writer instead of failing).
 */
import { join } from "node:path"
import type { Errors, Redaction } from "@palyra/core"
import { AfterRun, Embeddings } from "@palyra/core/memory"
import { Models } from "@palyra/core/models"
import { SqliteMemoryStore, SqliteTaskQueue, SqliteVectorIndex } from "@palyra/journal"
import { Duration, Effect, type Scope } from "effect"
import type { Config } from "../Config.js"

/** @internal */
export const afterRunOf = (
  config: Config,
  redaction: Redaction.RedactionOptions,
  env: Record<string, string | undefined> = process.env
): Effect.Effect<AfterRun.AfterRun, Errors.JournalError | Errors.InvalidArgument, Scope.Scope> =>
  Effect.gen(function* () {
    const filename = join(config.dataDir, "journal.db")
    const { memory, learning, watchdog, tasks } = config
    // Learning writes to the memory store even when memory is not injected or offered as tools.
    const lexical =
      memory.enabled || learning.enabled ? yield* SqliteMemoryStore.make({ filename, redaction }) : undefined
    // With an embedding model, searches blend in cosine over vectors kept beside the items.
    const store =
      lexical === undefined || memory.embedding_model === undefined
        ? lexical
        : Embeddings.withVectors(lexical, {
            embedder: yield* Models.embedderFromSpec(memory.embedding_model, env),
            index: yield* SqliteVectorIndex.make({ filename }),
            vectorWeight: memory.vector_weight
          })
    const queue = store === undefined ? undefined : yield* SqliteTaskQueue.make({ filename, redaction })
    return AfterRun.make({
      store,
      queue,
      memory: memory.enabled
        ? {
            tokenBudget: memory.inject_budget_tokens,
            maxItems: memory.inject_max_items,
            tools: memory.tools,
            autoIngest: memory.auto_ingest
          }
        : false,
      learning: learning.enabled
        ? {
            extractor: learning.model === "session" ? "model" : "deterministic",
            autoWriteThresholdBps: learning.auto_write_threshold_bps,
            minConfidenceBps: learning.min_confidence_bps
          }
        : false,
      watchdog:
        watchdog.mode === "off"
          ? false
          : {
              mode: watchdog.mode,
              interval: Duration.seconds(watchdog.interval_seconds),
              runStallAfter: Duration.seconds(watchdog.run_stall_seconds),
              approvalWarnAfter: Duration.seconds(watchdog.approval_warn_seconds),
              processMaxAge: Duration.seconds(watchdog.process_max_seconds),
              principal: "system:watchdog"
            },
      worker: {
        concurrency: tasks.concurrency,
        lease: Duration.seconds(tasks.lease_seconds),
        pollInterval: "500 millis"
      }
    })
  })
