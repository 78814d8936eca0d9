/**
 * `@palyra/core/memory`: memory across sessions, the background queue, learning from finished runs
 * and the watchdog. Not part of the root entry point.
 *
 * - `TaskQueue`: the durable background queue port (leases, heartbeats, backoff, expiry), its
 *   in-memory adapter and `TaskQueue.worker`;
 * - `MemoryStore`: the memory port (scoped items, BM25 + recency search, dedupe, review candidates)
 *   and its in-memory adapter;
 * - `Memory`: auto-injection into the prompt (`Memory.injecting`) and the `memory.search` /
 *   `memory.save` tools;
 * - `Learning`: post-run reflection on the queue, with a review queue;
 * - `Watchdog`: incidents for stalled runs, lost task leases, waiting approvals and journal stalls.
 *
 * The SQLite adapters (`SqliteTaskQueue`, `SqliteMemoryStore`) are in `@palyra/journal`.
 *
 * ```ts
 * import { Memory, MemoryStore } from "@palyra/core/memory"
 * const assembler = Memory.layer({ tokenBudget: 400 }).pipe(Layer.provide(MemoryStore.layerMemory()))
 * ```
 *
 * @since 0.1.0
 */

export * as AfterRun from "./adapters/memory/AfterRun.js"
export * as Background from "./adapters/memory/Background.js"
export * as Embeddings from "./adapters/memory/Embeddings.js"
export * as Learning from "./adapters/memory/Learning.js"
export * as Memory from "./adapters/memory/Memory.js"
export * as Watchdog from "./adapters/memory/Watchdog.js"
export * as MemoryStore from "./ports/MemoryStore.js"
export * as TaskQueue from "./ports/TaskQueue.js"
