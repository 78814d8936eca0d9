/**
 * `@palyra/core/context`: the context engine — token counting with a real tokenizer, model windows,
 * window-aware prompt assembly, compaction (`session_window_v1`) with checkpoints, restoring a
 * session's prompt to a checkpoint, context references in user messages (`ReferenceSyntax`,
 * `References`) and durable facts in a workspace file (`FactsFile`). Not part of the root entry
 * point: its tokenizer tables load only when it is used.
 *
 * ```ts
 * import { ContextEngine } from "@palyra/core/context"
 * const engine = yield* ContextEngine.make({ journal, model, contextWindow: 32_000 })
 * ```
 *
 * @since 0.1.0
 */
export * as Compactor from "./adapters/context/Compactor.js"
export * as ContextEngine from "./adapters/context/ContextEngine.js"
export * as FactsFile from "./adapters/context/FactsFile.js"
export * as ModelLimits from "./adapters/context/ModelLimits.js"
export * as ReferenceSyntax from "./adapters/context/ReferenceSyntax.js"
export * as References from "./adapters/context/References.js"
export * as Tokenizer from "./adapters/context/Tokenizer.js"
