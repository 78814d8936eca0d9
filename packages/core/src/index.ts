/**
 * `@palyra/core`: Palyra's kernel, and only the kernel — importing it loads neither Cedar's wasm nor
 * the AI SDK. The code is arranged by role:
 *
 * - `domain/`: schemas and pure functions (ids, run state machine, tape events, records, errors);
 * - `ports/`: the services the kernel needs and adapters provide (`Journal`, `ModelProvider`,
 *   `ToolRuntime`, `PolicyEngine`, `PromptAssembler`);
 * - `kernel/`: the Gateway, the agent loop, the agent registry, approvals, access control and the
 *   one assembly (`Kernel.layer`) that wires them;
 * - `adapters/`: implementations of the ports, each behind its own entry point so its dependencies
 *   load only when used — `@palyra/core/cedar`, `@palyra/core/ai-sdk`, `@palyra/core/models`,
 *   `@palyra/core/tools` (the in-memory journal and the scripted model are light and stay here);
 * - `promise/`: the Promise API (`createPalyra`, `defineTool`) for code that does not use Effect;
 * - `testing/`: `@palyra/core/testing` and `@palyra/core/journal-contract`.
 *
 * @since 0.1.0
 */

export * as MemoryJournal from "./adapters/MemoryJournal.js"
export * as ScriptedModel from "./adapters/ScriptedModel.js"
export * as Agent from "./domain/Agent.js"
export * as Caller from "./domain/Caller.js"
export * as Canonical from "./domain/Canonical.js"
export * as Errors from "./domain/Errors.js"
export { isPalyraError } from "./domain/Errors.js"
export * as Ids from "./domain/Ids.js"
export * as Records from "./domain/Records.js"
export * as Redaction from "./domain/Redaction.js"
export * as RunState from "./domain/RunState.js"
export * as TapeEvent from "./domain/TapeEvent.js"
export * as Agents from "./kernel/Agents.js"
export * as Approvals from "./kernel/Approvals.js"
export * as Attachments from "./kernel/Attachments.js"
export * as Auth from "./kernel/Auth.js"
export * as Follower from "./kernel/Follower.js"
export * as Gateway from "./kernel/Gateway.js"
export * as Kernel from "./kernel/Kernel.js"
export * as Metrics from "./kernel/Metrics.js"
export * as PromptAssembler from "./kernel/PromptAssembler.js"
export * as RunHooks from "./kernel/RunHooks.js"
export * as RunView from "./kernel/RunView.js"
export * as BlobStore from "./ports/BlobStore.js"
export * as Compactor from "./ports/Compactor.js"
export * as Journal from "./ports/Journal.js"
export * as LiveTape from "./ports/LiveTape.js"
export * as ModelProvider from "./ports/ModelProvider.js"
export * as Pairing from "./ports/Pairing.js"
export * as PolicyEngine from "./ports/PolicyEngine.js"
export * as Tool from "./ports/Tool.js"

// The Promise API, for code that does not use Effect.
export {
  type ApprovalAnswer,
  createPalyra,
  type DefineToolOptions,
  defineTool,
  type JournalAdapter,
  journalAdapter,
  type MessageOptions,
  type ModelAdapter,
  memoryJournal,
  modelAdapter,
  type Palyra,
  type PalyraAgent,
  type PalyraApproval,
  type PalyraBinding,
  type PalyraBudgets,
  type PalyraOptions,
  type PolicyAdapter,
  type PolicyRule,
  policyAdapter,
  type RunResult,
  type StartedRun,
  scriptedModel,
  type ToolCallContext,
  type ToolDefinition,
  toolAdapter
} from "./promise/Palyra.js"
