/**
 * `@palyra/core`: Palyra's kernel. Effect API as namespaces (`Gateway.layer`, `Journal.Journal`, …)
 * and a Promise API (`createPalyra`, `defineTool`) for code that does not use Effect.
 *
 * @since 0.1.0
 */

export * as AiSdkModel from "./AiSdkModel.js"
export * as Approvals from "./Approvals.js"
export * as Auth from "./Auth.js"
export * as BuiltinTools from "./BuiltinTools.js"
export * as Canonical from "./Canonical.js"
export * as CedarPolicy from "./CedarPolicy.js"
export * as Errors from "./Errors.js"
export { isPalyraError } from "./Errors.js"
export * as Gateway from "./Gateway.js"
export * as Ids from "./Ids.js"
export * as Journal from "./Journal.js"
export * as ModelProvider from "./ModelProvider.js"
export * as Models from "./Models.js"
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
  type PalyraApproval,
  type PalyraOptions,
  type PolicyRule,
  type RunResult,
  type StartedRun,
  scriptedModel,
  type ToolCallContext,
  type ToolDefinition
} from "./Palyra.js"
export * as PolicyEngine from "./PolicyEngine.js"
export * as Records from "./Records.js"
export * as Redaction from "./Redaction.js"
export * as RunState from "./RunState.js"
export * as ScriptedModel from "./ScriptedModel.js"
export * as TapeEvent from "./TapeEvent.js"
export * as Tool from "./Tool.js"
