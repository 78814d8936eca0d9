/**
 * The Promise API: embed Palyra in any Node app without touching Effect.
 *
 * ```ts
 * import { createPalyra, defineTool, scriptedModel } from "@palyra/core"
 *
 * const palyra = createPalyra({
 *   model: scriptedModel([{ toolCalls: [{ name: "clock", args: {} }] }, { text: "Done." }]),
 *   tools: [defineTool({ name: "clock", description: "Current time", parameters: { type: "object" }, risk: "low",
 *     execute: async () => new Date().toISOString() })]
 * })
 * const result = await palyra.run("What time is it?")
 * console.log(result.text)
 * await palyra.close()
 * ```
 *
 * Errors are Palyra's own tagged errors (`instanceof` works; `_tag` and `code` are stable). Every
 * method takes an optional `AbortSignal`.
 *
 * @since 0.1.0
 */
import { Cause, Duration, Effect, Exit, Layer, ManagedRuntime, Runtime, Schema, Stream } from "effect"
import * as References from "../adapters/context/References.js"
import * as MemoryJournal from "../adapters/MemoryJournal.js"
import * as ScriptedModel from "../adapters/ScriptedModel.js"
import * as Caller from "../domain/Caller.js"
import { ToolError } from "../domain/Errors.js"
import * as Ids from "../domain/Ids.js"
import type { ApprovalRecord, ApprovalStatus, Run, Session } from "../domain/Records.js"
import type { ApprovalScope, Risk, TapeEvent } from "../domain/TapeEvent.js"
import type * as Attachments from "../kernel/Attachments.js"
import * as Gateway from "../kernel/Gateway.js"
import * as PromptAssembler from "../kernel/PromptAssembler.js"
import type * as Journal from "../ports/Journal.js"
import type { Service as ModelService } from "../ports/ModelProvider.js"
import type * as PolicyEngine from "../ports/PolicyEngine.js"
import * as Tool from "../ports/Tool.js"
import { type AfterRunOptions, backgroundApi, kernelWith } from "./afterRun.js"

const AdapterTypeId: unique symbol = Symbol.for("@palyra/core/Adapter")

/** A journal to pass to `createPalyra` (e.g. `sqliteJournal(...)` from `@palyra/journal`). @since 0.1.0 @category Adapters */
export interface JournalAdapter {
  readonly [AdapterTypeId]: "journal"
}
/** A model to pass to `createPalyra`. @since 0.1.0 @category Adapters */
export interface ModelAdapter {
  readonly [AdapterTypeId]: "model"
}
/** A policy engine to pass to `createPalyra` (e.g. `CedarPolicy.adapter(...)` from `@palyra/core/cedar`). @since 0.1.0 @category Adapters */
export interface PolicyAdapter {
  readonly [AdapterTypeId]: "policy"
}
/** A tool made with `defineTool`. @since 0.1.0 @category Adapters */
export interface ToolDefinition {
  readonly [AdapterTypeId]: "tool"
  readonly name: string
}

interface Internal<L> {
  readonly value: L
}
const wrap = <K extends "journal" | "model" | "policy" | "tool", L>(kind: K, value: L, extra: object = {}) =>
  ({ [AdapterTypeId]: kind, value, ...extra }) as unknown as { readonly [AdapterTypeId]: K }
const unwrap = <L>(adapter: object): L => (adapter as unknown as Internal<L>).value

/** Wrap a journal layer as an adapter value (for adapter packages). @since 0.1.0 @category Adapters */
export const journalAdapter = (layer: Layer.Layer<Journal.Journal, unknown>): JournalAdapter =>
  wrap("journal", layer) as JournalAdapter
/** Wrap a `ModelProvider` service as an adapter value. @since 0.1.0 @category Adapters */
export const modelAdapter = (model: ModelService): ModelAdapter => wrap("model", model) as ModelAdapter
/** Wrap a policy engine layer as an adapter value (for adapter packages). @since 0.1.0 @category Adapters */
export const policyAdapter = (layer: Layer.Layer<PolicyEngine.PolicyEngine, unknown>): PolicyAdapter =>
  wrap("policy", layer) as PolicyAdapter
/** Wrap an Effect `Tool` (e.g. `BuiltinTools.fsTools(...)` from `@palyra/core/tools`) as a tool definition. @since 0.1.0 @category Adapters */
export const toolAdapter = (tool: Tool.AnyTool): ToolDefinition =>
  wrap("tool", tool, { name: tool.name }) as ToolDefinition
/** The in-memory journal (the default). @since 0.1.0 @category Adapters */
export const memoryJournal = (): JournalAdapter => journalAdapter(MemoryJournal.layer())

/** A deterministic model that plays a script (honest test double; also the offline demo). @since 0.1.0 @category Adapters */
export const scriptedModel = (script: ScriptedModel.Script, options: { readonly name?: string } = {}): ModelAdapter =>
  modelAdapter(ScriptedModel.make(script, options))

/** What a Promise-based tool receives besides its arguments. @since 0.1.0 @category Tools */
export interface ToolCallContext {
  readonly sessionId: string
  readonly runId: string
  readonly toolCallId: string
  readonly principal: string
  /** Aborted when the run is cancelled or the tool times out: stop work when it fires. */
  readonly signal: AbortSignal
  /** Write a note onto the session's tape. */
  readonly note: (text: string) => Promise<void>
}

/** @since 0.1.0 @category Tools */
export interface DefineToolOptions<A> {
  readonly name: string
  readonly description: string
  /** An Effect `Schema` or a JSON Schema object; arguments are validated before `execute` runs. */
  // biome-ignore lint/suspicious/noExplicitAny: the encoded side of the schema is free
  readonly parameters: Schema.Schema<A, any> | Record<string, unknown>
  /** `low` runs under the default policy; `sensitive` needs approval; `critical` is denied. Default `sensitive`. */
  readonly risk?: Risk
  readonly category?: string
  readonly timeoutMs?: number
  /** Largest output in characters the model gets back (default 16,000). */
  readonly outputBudget?: number
  /** Whether re-running after a crash is safe (default `atMostOnce`). */
  readonly idempotency?: Tool.Idempotency
  readonly execute: (args: A, context: ToolCallContext) => Promise<unknown> | unknown
}

/** Define a tool with a Promise-returning `execute`. @since 0.1.0 @category Tools */
export const defineTool = <A = Record<string, unknown>>(options: DefineToolOptions<A>): ToolDefinition => {
  const execute = (args: A, ctx: Tool.ToolContext) =>
    Effect.flatMap(Effect.runtime<never>(), (runtime) =>
      Effect.tryPromise({
        try: async (signal) =>
          options.execute(args, {
            sessionId: ctx.sessionId,
            runId: ctx.runId,
            toolCallId: ctx.toolCallId,
            principal: ctx.principal,
            signal,
            note: (text) => Runtime.runPromise(runtime)(ctx.note(text))
          }),
        catch: (cause) =>
          new ToolError({
            tool: options.name,
            reason: "failed",
            message: cause instanceof Error ? cause.message : String(cause),
            cause
          })
      })
    )
  const common = {
    description: options.description,
    risk: options.risk,
    category: options.category,
    timeout: options.timeoutMs === undefined ? undefined : Duration.millis(options.timeoutMs),
    outputBudget: options.outputBudget,
    idempotency: options.idempotency,
    execute
  } as const
  const tool: Tool.AnyTool = Schema.isSchema(options.parameters)
    ? Tool.make(options.name, { ...common, parameters: options.parameters as Schema.Schema<A> })
    : Tool.fromJsonSchema<A>(options.name, { ...common, parameters: options.parameters as Record<string, unknown> })
  return wrap("tool", tool, { name: options.name }) as ToolDefinition
}

/** A policy rule (see `PolicyEngine.Rule`). @since 0.1.0 @category Models */
export type PolicyRule = PolicyEngine.Rule

/** What `onApproval` answers. @since 0.1.0 @category Models */
export type ApprovalAnswer =
  | "approve"
  | "deny"
  | { readonly decision: "approve" | "deny"; readonly scope?: ApprovalScope; readonly reason?: string }

/** A pending approval, as plain data. @since 0.1.0 @category Models */
export type PalyraApproval = ApprovalRecord

/** Budgets, in plain numbers. @since 0.1.0 @category Models */
export interface PalyraBudgets {
  readonly maxModelTurns?: number
  readonly maxToolCalls?: number
  readonly maxEventsPerTurn?: number
  readonly wallClockMs?: number
  readonly maxTokensPerRun?: number
  readonly maxTokensPerSession?: number
}

/**
 * An agent sessions can be bound to: its own instructions, model (or fail-over list) and tools.
 * `id: "default"` replaces the instance's default agent.
 *
 * @since 0.1.0
 * @category Models
 */
export interface PalyraAgent {
  readonly id: string
  readonly description?: string
  readonly instructions?: string
  /** Its model, or a fail-over list (default: the instance's `model`). */
  readonly model?: ModelAdapter | ReadonlyArray<ModelAdapter>
  /** Tool names it may use; `ns.*` for a namespace, `*` for all (default). */
  readonly tools?: ReadonlyArray<string>
  /** Its budgets, over the instance's. */
  readonly budgets?: PalyraBudgets
}

/**
 * Which agent answers new sessions of a channel (and account, conversation) when a message names
 * none. @since 0.1.0 @category Models
 */
export interface PalyraBinding {
  readonly channel: string
  readonly account?: string
  readonly conversation?: string
  readonly agent: string
}

/** @since 0.1.0 @category Models */
export interface PalyraOptions extends AfterRunOptions {
  readonly model: ModelAdapter
  readonly tools?: ReadonlyArray<ToolDefinition>
  /** Policy rules; default: low risk allowed, sensitive needs approval, critical denied. */
  readonly policies?: ReadonlyArray<PolicyRule>
  /** A policy engine (e.g. Cedar from `@palyra/core/cedar`); replaces `policies`. */
  readonly policy?: PolicyAdapter
  /** Default: in memory. */
  readonly journal?: JournalAdapter
  readonly instructions?: string
  readonly budgets?: PalyraBudgets
  /** Agents sessions can be bound to (`MessageOptions.agent`); without them, one default agent. */
  readonly agents?: ReadonlyArray<PalyraAgent>
  /** Which agent answers new sessions of a channel conversation (`MessageOptions.channel`, …). */
  readonly bindings?: ReadonlyArray<PalyraBinding>
  readonly approvalTimeoutMs?: number
  /**
   * Answer approvals in-process (e.g. ask your own UI). While set, every session has an approval
   * channel. Without it, approvals go to whoever consumes a run's events and calls `resolveApproval`.
   */
  readonly onApproval?: (approval: PalyraApproval) => Promise<ApprovalAnswer> | ApprovalAnswer
  /** The principal used when a call names none (default `"local"`). */
  readonly defaultPrincipal?: string
  /**
   * Resolve context references (`@file:`, `@folder:`, `@url:`, `@run:`, `@session:`) in messages
   * (see `References` in `@palyra/core/context`). `@file:`, `@folder:` and `@url:` pass the gates of
   * the tools they stand for: `fs.read`, `fs.list`, `http.fetch` must be among `tools` (`toolAdapter`),
   * allowed to the session's agent and by policy; `@url:` also follows `allowHosts`.
   */
  readonly references?: {
    readonly workspace?: string
    readonly allowHosts?: ReadonlyArray<string>
    readonly allowPrivateNetworks?: boolean
    readonly limits?: References.Limits
  }
  /** Attachment limits, and whether the model accepts images (default: known per model family). */
  readonly attachments?: Attachments.Limits
}

/** Where a message goes. @since 0.1.0 @category Models */
export interface MessageOptions {
  readonly principal?: string
  readonly sessionId?: string
  /** Reuse (or create) the principal's session with this key. */
  readonly sessionKey?: string
  /** The agent that answers a new session (an existing session keeps its own). */
  readonly agent?: string
  /** Where the message came from, for `bindings` (when no `agent` is named). */
  readonly channel?: string
  readonly account?: string
  readonly conversation?: string
  readonly signal?: AbortSignal
  /** Images (PNG, JPEG, GIF, WebP) and text files that come with the message. */
  readonly attachments?: ReadonlyArray<{
    readonly data: Uint8Array
    readonly name?: string
    readonly mediaType?: string
  }>
}

/** @since 0.1.0 @category Models */
export interface RunResult {
  readonly runId: string
  readonly sessionId: string
  readonly state: Run["state"]
  /** The final assistant message, when the run completed. */
  readonly text: string
  readonly error: { readonly code: string; readonly message: string } | null
  readonly events: ReadonlyArray<TapeEvent>
}

/** @since 0.1.0 @category Models */
export interface StartedRun {
  readonly runId: string
  readonly sessionId: string
  /** This run's events until it ends. Breaking out of the loop stops listening, not the run. */
  readonly events: AsyncIterable<TapeEvent>
}

/** The embedded Palyra instance. @since 0.1.0 @category Models */
export interface Palyra extends AsyncDisposable {
  /** Send a message and wait for the run to end. */
  run(text: string, options?: MessageOptions): Promise<RunResult>
  /** Send a message and stream the run's events. */
  startRun(text: string, options?: MessageOptions): Promise<StartedRun>
  /** Send a message without waiting. */
  send(text: string, options?: MessageOptions): Promise<{ readonly runId: string; readonly sessionId: string }>
  cancelRun(runId: string, options?: { readonly by?: string; readonly signal?: AbortSignal }): Promise<Run>
  getRun(runId: string, options?: { readonly signal?: AbortSignal }): Promise<Run>
  waitForRun(runId: string, options?: { readonly signal?: AbortSignal }): Promise<Run>
  listApprovals(filter?: {
    readonly sessionId?: string
    readonly runId?: string
    readonly status?: ApprovalStatus
  }): Promise<ReadonlyArray<PalyraApproval>>
  resolveApproval(
    approvalId: string,
    decision: "approve" | "deny",
    options?: {
      readonly scope?: ApprovalScope
      readonly by?: string
      readonly reason?: string
      readonly signal?: AbortSignal
    }
  ): Promise<PalyraApproval>
  session(options: {
    readonly principal?: string
    readonly sessionId?: string
    readonly sessionKey?: string
    readonly title?: string
  }): Promise<Session>
  resetSession(sessionId: string, options?: { readonly principal?: string }): Promise<Session>
  readTape(
    sessionId: string,
    options?: { readonly afterSeq?: number; readonly limit?: number }
  ): Promise<ReadonlyArray<TapeEvent>>
  /** Replay a session's tape after `afterSeq`, then follow it live. */
  subscribe(sessionId: string, afterSeq?: number): AsyncIterable<TapeEvent>
  verifyJournal(): Promise<Journal.VerifyResult>
  /** Learning candidates, memory, incidents and tasks (with `memory` / `learning` / `watchdog` on). */
  readonly learning: ReturnType<typeof backgroundApi>["learning"]
  readonly memory: ReturnType<typeof backgroundApi>["memory"]
  incidents: ReturnType<typeof backgroundApi>["incidents"]
  tasks: ReturnType<typeof backgroundApi>["tasks"]
  close(): Promise<void>
}

/**
 * Create an embedded Palyra. Nothing starts a process, a server or a signal handler; call `close()`
 * (or `await using`) to stop runs and release the journal.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const createPalyra = (options: PalyraOptions): Palyra => {
  const principalOf = (o?: { readonly principal?: string | undefined }) =>
    o?.principal ?? options.defaultPrincipal ?? "local"
  // The embedding application is the trust root: calls that name a principal act as that principal
  // (its sessions, its keys); the rest act as an operator of this instance.
  const asUser = (o?: { readonly principal?: string | undefined }) => Caller.user(principalOf(o))
  const asOperator = (by?: string) => Caller.operator(by ?? principalOf())
  const budgetsOf = (b: PalyraBudgets | undefined) =>
    b && {
      maxModelTurns: b.maxModelTurns,
      maxToolCalls: b.maxToolCalls,
      maxEventsPerTurn: b.maxEventsPerTurn,
      wallClock: b.wallClockMs === undefined ? undefined : Duration.millis(b.wallClockMs),
      maxTokensPerRun: b.maxTokensPerRun,
      maxTokensPerSession: b.maxTokensPerSession
    }
  const modelOf = (m: ModelAdapter | ReadonlyArray<ModelAdapter>) =>
    Array.isArray(m)
      ? (m as ReadonlyArray<ModelAdapter>).map((x) => unwrap<ModelService>(x))
      : unwrap<ModelService>(m as ModelAdapter)
  const kernel = kernelWith(options, {
    agents: options.agents?.map((a) => ({
      id: a.id,
      description: a.description,
      instructions: a.instructions,
      model: a.model === undefined ? undefined : modelOf(a.model),
      tools: a.tools,
      budgets: budgetsOf(a.budgets)
    })),
    bindings: options.bindings,
    model: unwrap<ModelService>(options.model),
    tools: (options.tools ?? []).map((t) => unwrap<Tool.AnyTool>(t)),
    journal: unwrap<Layer.Layer<Journal.Journal, unknown>>(options.journal ?? memoryJournal()),
    policy: options.policy ? unwrap<Layer.Layer<PolicyEngine.PolicyEngine, unknown>>(options.policy) : undefined,
    rules: options.policies,
    instructions: options.instructions,
    attachments: options.attachments,
    ...(options.references === undefined
      ? {}
      : {
          promptAssembler: References.layer(PromptAssembler.layer, {
            workspace: options.references.workspace,
            http: {
              allowHosts: options.references.allowHosts ?? [],
              allowPrivateNetworks: options.references.allowPrivateNetworks
            },
            limits: options.references.limits
          })
        }),
    approvalTimeout: options.approvalTimeoutMs === undefined ? undefined : Duration.millis(options.approvalTimeoutMs),
    budgets: budgetsOf(options.budgets)
  })
  const onApproval = options.onApproval
  const approver = onApproval
    ? Layer.scopedDiscard(
        Effect.gen(function* () {
          const gateway = yield* Gateway.Gateway
          const caller = asOperator("onApproval")
          const answer = (record: ApprovalRecord) =>
            Effect.tryPromise(async () => onApproval(record)).pipe(
              Effect.map((a) => (typeof a === "string" ? { decision: a } : a)),
              Effect.orElseSucceed(() => ({ decision: "deny" as const, reason: "onApproval threw" })),
              Effect.flatMap((a) =>
                gateway.resolveApproval(caller, {
                  approvalId: record.id,
                  decision: a.decision,
                  scope: "scope" in a ? a.scope : undefined,
                  reason: "reason" in a ? a.reason : undefined
                })
              ),
              Effect.catchAll((e) => Effect.logWarning("onApproval could not resolve", e))
            )
          yield* gateway.watchApprovals(caller).pipe(
            Stream.runForEach((record) => Effect.fork(answer(record))),
            Effect.forkScoped
          )
        })
      ).pipe(Layer.provideMerge(kernel))
    : kernel
  const runtime = ManagedRuntime.make(approver as Layer.Layer<Gateway.Gateway | Journal.Journal, unknown>)

  const run = <A>(effect: Effect.Effect<A, unknown, Gateway.Gateway | Journal.Journal>, signal?: AbortSignal) =>
    runtime.runPromiseExit(effect, signal ? { signal } : undefined).then((exit) => {
      if (Exit.isSuccess(exit)) return exit.value
      throw Cause.squash(exit.cause)
    })
  const withGateway = <A>(f: (g: Gateway.Service) => Effect.Effect<A, unknown>, signal?: AbortSignal) =>
    run(Effect.flatMap(Gateway.Gateway, f), signal)
  const iterate = (
    stream: Stream.Stream<TapeEvent, unknown, Gateway.Gateway | Journal.Journal>
  ): AsyncIterable<TapeEvent> => ({
    [Symbol.asyncIterator]: () => {
      let inner: AsyncIterator<TapeEvent> | undefined
      const get = async () => {
        inner ??= Stream.toAsyncIterableRuntime(stream, await runtime.runtime())[Symbol.asyncIterator]()
        return inner
      }
      return {
        next: async () => (await get()).next(),
        return: async (value?: unknown) => {
          const it = await get()
          return it.return ? it.return(value) : { done: true, value: undefined }
        }
      }
    }
  })
  const optionalId = <A>(schema: Schema.Schema<A, string>, value: string | undefined, field: string) =>
    value === undefined ? Effect.succeed(undefined) : Ids.parse(schema, value, field)
  const message = (text: string, o?: MessageOptions) =>
    Effect.map(
      optionalId(Ids.SessionId, o?.sessionId, "sessionId"),
      (sessionId): Gateway.MessageRequest => ({
        text,
        sessionId,
        key: o?.sessionKey,
        agent: o?.agent,
        channel: o?.channel,
        account: o?.account,
        conversation: o?.conversation,
        attachments: o?.attachments
      })
    )
  const runIdOf = (id: string) => Ids.parse(Ids.RunId, id, "runId")
  const sessionIdOf = (id: string) => Ids.parse(Ids.SessionId, id, "sessionId")

  const palyra: Palyra = {
    run: (text, o) =>
      withGateway(
        (g) =>
          Effect.gen(function* () {
            const caller = asUser(o)
            const started = yield* g.startRun(caller, yield* message(text, o))
            const events = yield* Stream.runCollect(started.events)
            const list = [...events]
            const final = yield* g.getRun(caller, started.run.id)
            const answer = list.filter((e) => e._tag === "AssistantMessage").at(-1)
            return {
              runId: final.id,
              sessionId: final.sessionId,
              state: final.state,
              text: final.state === "Done" && answer?._tag === "AssistantMessage" ? answer.text : "",
              error: final.error,
              events: list
            }
          }),
        o?.signal
      ),
    startRun: (text, o) =>
      withGateway(
        (g) =>
          Effect.flatMap(message(text, o), (request) =>
            Effect.map(g.startRun(asUser(o), request), (s) => ({
              runId: s.run.id,
              sessionId: s.session.id,
              events: iterate(s.events)
            }))
          ),
        o?.signal
      ),
    send: (text, o) =>
      withGateway(
        (g) =>
          Effect.flatMap(message(text, o), (request) =>
            Effect.map(g.sendMessage(asUser(o), request), (s) => ({ runId: s.run.id, sessionId: s.session.id }))
          ),
        o?.signal
      ),
    cancelRun: (runId, o) =>
      withGateway(
        (g) => Effect.flatMap(runIdOf(runId), (id) => g.cancelRun(asOperator(o?.by ?? "api"), id)),
        o?.signal
      ),
    getRun: (runId, o) =>
      withGateway((g) => Effect.flatMap(runIdOf(runId), (id) => g.getRun(asOperator(), id)), o?.signal),
    waitForRun: (runId, o) =>
      withGateway((g) => Effect.flatMap(runIdOf(runId), (id) => g.awaitRun(asOperator(), id)), o?.signal),
    listApprovals: (f = {}) =>
      withGateway((g) =>
        Effect.gen(function* () {
          return yield* g.listApprovals(asOperator(), {
            sessionId: yield* optionalId(Ids.SessionId, f.sessionId, "sessionId"),
            runId: yield* optionalId(Ids.RunId, f.runId, "runId"),
            status: f.status
          })
        })
      ),
    resolveApproval: (approvalId, decision, o) =>
      withGateway(
        (g) =>
          Effect.flatMap(Ids.parse(Ids.ApprovalId, approvalId, "approvalId"), (id) =>
            g.resolveApproval(asOperator(o?.by), { approvalId: id, decision, scope: o?.scope, reason: o?.reason })
          ),
        o?.signal
      ),
    session: (o) =>
      withGateway((g) =>
        Effect.flatMap(optionalId(Ids.SessionId, o.sessionId, "sessionId"), (sessionId) =>
          g.resolveSession(asUser(o), { sessionId, key: o.sessionKey, title: o.title })
        )
      ),
    resetSession: (sessionId, o) =>
      withGateway((g) => Effect.flatMap(sessionIdOf(sessionId), (id) => g.resetSession(asUser(o), id))),
    readTape: (sessionId, o) =>
      withGateway((g) =>
        Effect.flatMap(sessionIdOf(sessionId), (id) =>
          g.readTape(asOperator(), id, { afterSeq: o?.afterSeq ?? 0, limit: o?.limit })
        )
      ),
    subscribe: (sessionId, afterSeq = 0) =>
      iterate(
        Stream.unwrap(
          Effect.map(Effect.zip(Gateway.Gateway, sessionIdOf(sessionId)), ([g, id]) =>
            g.subscribe(asOperator(), id, afterSeq, { approver: true })
          )
        )
      ),
    verifyJournal: () => withGateway((g) => g.verifyJournal(asOperator())),
    ...backgroundApi(run, asUser, () => asOperator()),
    close: () => runtime.dispose(),
    [Symbol.asyncDispose]: () => runtime.dispose()
  }
  return palyra
}
