/**
 * The one assembly of Palyra's kernel: a Gateway over a journal, a model, tools, a policy engine,
 * approvals and the prompt-assembly stage, built from plain options. The Promise API, the daemon
 * and `@palyra/core/testing` all build their Gateway here, so a new kernel service is wired once.
 *
 * ```ts
 * const kernel = Kernel.layer({ model, tools, journal: SqliteJournal.layer({ filename }), policy: CedarPolicy.layer() })
 * ```
 *
 * With `agents` (and `bindings`), sessions are answered by the agent they are bound to; `model`,
 * `instructions`, `budgets` and all `tools` make the `default` agent (see `Agents`).
 *
 * @since 0.1.0
 */
import { Layer } from "effect"
import * as MemoryJournal from "../adapters/MemoryJournal.js"
import { DEFAULT_AGENT } from "../domain/Agent.js"
import { InvalidArgument, type JournalError } from "../domain/Errors.js"
import * as Redaction from "../domain/Redaction.js"
import * as BlobStore from "../ports/BlobStore.js"
import type { Journal } from "../ports/Journal.js"
import * as LiveTape from "../ports/LiveTape.js"
import { ModelProvider, type Service as ModelService } from "../ports/ModelProvider.js"
import * as PolicyEngine from "../ports/PolicyEngine.js"
import * as Tool from "../ports/Tool.js"
import * as Agents from "./Agents.js"
import * as Approvals from "./Approvals.js"
import * as Attachments from "./Attachments.js"
import * as Gateway from "./Gateway.js"
import * as PromptAssembler from "./PromptAssembler.js"
import { RunHooks, type Service as RunHooksService } from "./RunHooks.js"

/** @since 0.1.0 @category Models */
export interface Options<EJ = never, EP = never, EA = never> extends Gateway.Options, Agents.Options {
  /**
   * The default agent's model: a `ModelProvider` service, or a layer that builds one. It may be left
   * out when an agent with id `default` names its own model.
   */
  readonly model?: ModelService | Layer.Layer<ModelProvider, unknown> | undefined
  /** The tool catalog; each agent uses the ones its `tools` list names (the default agent: all). */
  readonly tools?: ReadonlyArray<Tool.AnyTool> | undefined
  /** The journal (default: a fresh in-memory journal). */
  readonly journal?: Layer.Layer<Journal, EJ> | undefined
  /** A policy engine (e.g. `CedarPolicy.layer(...)`); default: `rules`. */
  readonly policy?: Layer.Layer<PolicyEngine.PolicyEngine, EP> | undefined
  /** Rules for the built-in rule engine when no `policy` is given (default `PolicyEngine.defaultRules`). */
  readonly rules?: ReadonlyArray<PolicyEngine.Rule> | undefined
  /**
   * Secrets to redact from streamed model text as it arrives (default: the default rules). Give the
   * journal the same options, so what is stored and what is streamed agree.
   */
  readonly redaction?: Redaction.RedactionOptions | undefined
  /**
   * The prompt-assembly stage (default: the conversation from the tape). It may use the journal and
   * the model, e.g. the context engine from `@palyra/core/context` (`ContextEngine.layer(...)`),
   * which counts tokens against the model's window and compacts.
   */
  readonly promptAssembler?:
    | Layer.Layer<
        PromptAssembler.PromptAssembler,
        EA,
        Journal | ModelProvider | PolicyEngine.PolicyEngine | LiveTape.LiveTape
      >
    | undefined
  /** Where message attachments are kept (default: in memory; `SqliteBlobStore` in `@palyra/journal`). */
  readonly blobs?: BlobStore.Service | undefined
  /** Told when a run ends (e.g. post-run reflection, see `@palyra/core/memory`'s `AfterRun`); default: nothing. */
  readonly runHooks?: RunHooksService | undefined
}

/** The kernel's model: `model`, else the first model of the agent configured as `default`. */
const modelLayer = (options: Options<unknown, unknown, unknown>): Layer.Layer<ModelProvider, InvalidArgument> => {
  if (options.model !== undefined) {
    return Layer.isLayer(options.model)
      ? (options.model as Layer.Layer<ModelProvider>)
      : Layer.succeed(ModelProvider, options.model as ModelService)
  }
  const own = options.agents?.find((a) => a.id === DEFAULT_AGENT)?.model
  const first = own === undefined ? undefined : Array.isArray(own) ? own[0] : (own as ModelService)
  return first === undefined
    ? Layer.fail(
        new InvalidArgument({
          message: 'no model: give the kernel a model, or configure an agent with id "default" and a model',
          field: "model"
        })
      )
    : Layer.succeed(ModelProvider, first as ModelService)
}

/** Everything the kernel provides: the Gateway and the services it runs on, for inspection. @since 0.1.0 @category Models */
export type Services =
  | Gateway.Gateway
  | Agents.AgentRegistry
  | Journal
  | ModelProvider
  | Tool.ToolRuntime
  | PolicyEngine.PolicyEngine
  | Approvals.Approvals
  | PromptAssembler.PromptAssembler
  | BlobStore.BlobStore
  | LiveTape.LiveTape

/**
 * The kernel as one layer. Every service the Gateway uses is in the output too.
 *
 * @since 0.1.0
 * @category Layers
 */
export const layer = <EJ = never, EP = never, EA = never>(
  options: Options<EJ, EP, EA>
): Layer.Layer<Services, JournalError | InvalidArgument | EJ | EP | EA> => {
  const model = modelLayer(options)
  const journal = options.journal ?? (MemoryJournal.layer() as Layer.Layer<Journal, EJ>)
  const blobs = options.blobs === undefined ? BlobStore.layerMemory : Layer.succeed(BlobStore.BlobStore, options.blobs)
  const policy = options.policy ?? PolicyEngine.layerRules(options.rules ?? PolicyEngine.defaultRules)
  const services = Layer.mergeAll(
    model,
    Tool.layer(options.tools ?? []),
    policy,
    blobs,
    LiveTape.layer,
    Approvals.layer
  ).pipe(
    Layer.provideMerge(journal),
    (base) =>
      Agents.layer({
        agents: options.agents,
        bindings: options.bindings,
        instructions: options.instructions,
        budgets: options.budgets
      }).pipe(Layer.provideMerge(base)),
    // The assembler sees the agents (the context engine summarizes with the session's agent's model);
    // attachments are resolved from the blob store around whatever assembler is configured.
    (base) => Attachments.layer(options.promptAssembler ?? PromptAssembler.layer).pipe(Layer.provideMerge(base))
  )
  const hooked =
    options.runHooks === undefined
      ? Gateway.layer(options)
      : Gateway.layer(options).pipe(Layer.provide(Layer.succeed(RunHooks, options.runHooks)))
  const gateway = hooked.pipe(Layer.provideMerge(services))
  return options.redaction === undefined
    ? gateway
    : gateway.pipe(Layer.provide(Layer.succeed(Redaction.CurrentRedactor, Redaction.make(options.redaction))))
}
