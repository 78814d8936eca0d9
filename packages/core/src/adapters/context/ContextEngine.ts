/**
 * The context engine: a window-aware `PromptAssembler` and the `Compactor` behind it.
 *
 * Each model call's prompt is counted with a real tokenizer (see `Tokenizer`) against the model's
 * window (see `ModelLimits`). When it passes `triggerRatio` of the usable window (window − output
 * reserve), and at least `minInputTokens`, and the cooldown has passed, the older part of the
 * conversation is compacted (`session_window_v1`) before the call: the session's model writes a
 * sectioned summary, which must keep every identifier, path and number of what it covers (else a
 * deterministic extractive summary is used), the last turns, pinned notes and open work stay
 * verbatim, and a `CompactionApplied` event with a checkpoint goes on the tape.
 *
 * Assembly reads only what the window needs: the engine keeps, per session, the view of its prompt
 * (the active summary and the steps after it, each with its token count) and folds in only the events
 * that are new since the last call — from the loop's history when they are there, else from the
 * journal. A session seen for the first time is read backwards from its head to its last compaction,
 * not from its start.
 *
 * ```ts
 * const engine = yield* ContextEngine.make({ journal, model, contextWindow: 32_000 })
 * const kernel = Kernel.layer({ model, journal: Layer.succeed(Journal, journal),
 *   promptAssembler: Layer.succeed(PromptAssembler.PromptAssembler, engine.assembler) })
 * ```
 *
 * @since 0.1.0
 */
import { Cause, Clock, Context, Duration, Effect, Either, Layer, Option, Schema } from "effect"
import { Conflict, InvalidArgument, JournalError, NotFound } from "../../domain/Errors.js"
import { type RunId, type SessionId, ulid } from "../../domain/Ids.js"
import type { Session } from "../../domain/Records.js"
import type { TapeEvent, TapeEventOf } from "../../domain/TapeEvent.js"
import { AgentRegistry } from "../../kernel/Agents.js"
import * as PromptAssembler from "../../kernel/PromptAssembler.js"
import { Journal, type Service as JournalService, requireSession } from "../../ports/Journal.js"
import { LiveTape } from "../../ports/LiveTape.js"
import {
  ModelProvider,
  type ModelRequest,
  type Service as ModelService,
  runInto,
  type ToolSpec
} from "../../ports/ModelProvider.js"
import * as Compactor from "./Compactor.js"
import * as FactsFile from "./FactsFile.js"
import {
  bodyOf,
  capPinned,
  compactionRequest,
  extractive,
  mustKeep,
  type Pinned,
  pinnedSection,
  verify
} from "./internal/summary.js"
import {
  build,
  NeedsRebuild,
  planCut,
  Ranks,
  render,
  SUMMARY_PREFIX,
  step,
  stepTokens,
  type View,
  viewAttachmentTokens,
  viewTokens
} from "./internal/view.js"
import * as ModelLimits from "./ModelLimits.js"
import * as Tokenizer from "./Tokenizer.js"

/** @since 0.1.0 @category Models */
export interface Options extends ModelLimits.Overrides {
  /** The model name that picks the limits and the tokenizer (default: the `ModelProvider`'s name). */
  readonly modelName?: string | undefined
  /** Compact when the prompt passes this fraction of the usable window (default 0.8). */
  readonly triggerRatio?: number | undefined
  /** Aim for at most this fraction of the usable window after compacting (default 0.5). */
  readonly targetRatio?: number | undefined
  /** Budget of a summary, as a fraction of the usable window (default 0.15). */
  readonly summaryRatio?: number | undefined
  /** Never compact a prompt smaller than this (default 1,024 tokens). */
  readonly minInputTokens?: number | undefined
  /** Keep at least this many of the last user turns verbatim, when they fit (default 2). */
  readonly keepTurns?: number | undefined
  /** Model calls between two automatic compactions (default 2; ignored when the prompt no longer fits). */
  readonly cooldownTurns?: number | undefined
  /** Compact automatically before a model call (default true); `false` leaves it to `compact`. */
  readonly autoCompact?: boolean | undefined
  /** How long the model may take to write a summary before the extractive one is used (default 60 s). */
  readonly summaryTimeout?: Duration.DurationInput | undefined
  /** Sessions whose views stay cached (least recently used are dropped; default 1,000). */
  readonly maxSessions?: number | undefined
  /**
   * How events are appended (default: the journal's `append`). The Gateway passes its tape's append,
   * so live subscribers see `CompactionApplied` and `CheckpointRestored` as they happen.
   */
  readonly append?: JournalService["append"] | undefined
  /**
   * Write the facts of every applied compaction into the managed block of this workspace file (see
   * `FactsFile`; off by default).
   */
  readonly factsFile?: { readonly root: string; readonly file: string } | undefined
}

/** @since 0.1.0 @category Models */
export interface Deps {
  readonly journal: JournalService
  /** The model that writes summaries for sessions of agents `modelFor` does not name. */
  readonly model: ModelService
  /**
   * The model of an agent (its first): summaries of a session are written by its agent's model.
   * `layer`/`assembler` take it from the context's `AgentRegistry` when there is one.
   */
  readonly modelFor?: ((agentId: string) => ModelService | undefined) | undefined
}

/** @since 0.1.0 @category Models */
export interface ContextEngine {
  readonly assembler: PromptAssembler.Service
  readonly compactor: Compactor.Service
  readonly limits: ModelLimits.Limits
  /** Tokens of a request as this engine counts them (loads the tokenizer on first use). */
  readonly countRequest: (request: ModelRequest) => Effect.Effect<number>
}

interface Entry {
  readonly sessionId: SessionId
  readonly key: string
  readonly ranks: Ranks
  view: View
  /** The highest tape seq of the session folded into `view`. */
  lastSeq: number
  instructions: string | undefined
  tools: ReadonlyArray<ToolSpec>
  fixedTokens: number
}

const sessionKey = (s: Session) => `${s.historyFromSeq}/${s.resetGeneration}/${s.parentId ?? ""}/${s.parentSeq ?? ""}`
const ACTIVE = ["Pending", "Accepted", "InProgress", "WaitingForApproval"] as const
const PAGE = 512

const ratio = (name: string, value: number | undefined, fallback: number) =>
  value === undefined
    ? Effect.succeed(fallback)
    : value > 0 && value <= 1
      ? Effect.succeed(value)
      : Effect.fail(new InvalidArgument({ message: `${name} must be in (0, 1], got ${value}`, field: name }))
const count = (name: string, value: number | undefined, fallback: number, min = 0) =>
  value === undefined
    ? Effect.succeed(fallback)
    : Number.isInteger(value) && value >= min
      ? Effect.succeed(value)
      : Effect.fail(new InvalidArgument({ message: `${name} must be an integer ≥ ${min}, got ${value}`, field: name }))

/**
 * Build an engine over a journal and a model. Options are checked here (`InvalidArgument`).
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = (options: Deps & Options): Effect.Effect<ContextEngine, InvalidArgument> =>
  Effect.gen(function* () {
    const { journal, model } = options
    const limits = ModelLimits.limitsFor(options.modelName ?? model.name, options)
    yield* count("contextWindow", limits.contextWindow, 0, 256)
    yield* count("outputReserve", limits.outputReserve, 0, 0)
    if (limits.outputReserve >= limits.contextWindow) {
      return yield* new InvalidArgument({
        message: "outputReserve must be smaller than contextWindow",
        field: "outputReserve"
      })
    }
    const triggerRatio = yield* ratio("triggerRatio", options.triggerRatio, 0.8)
    const targetRatio = yield* ratio("targetRatio", options.targetRatio, 0.5)
    const summaryRatio = yield* ratio("summaryRatio", options.summaryRatio, 0.15)
    const minInputTokens = yield* count("minInputTokens", options.minInputTokens, 1_024)
    const keepTurns = yield* count("keepTurns", options.keepTurns, 2)
    const cooldownTurns = yield* count("cooldownTurns", options.cooldownTurns, 2)
    const maxSessions = yield* count("maxSessions", options.maxSessions, 1_000, 1)
    const summaryTimeout = Duration.decode(options.summaryTimeout ?? "60 seconds")
    const autoCompact = options.autoCompact ?? true
    const append = options.append ?? journal.append
    const usable = limits.contextWindow - limits.outputReserve
    const summaryTokens = Math.max(128, Math.floor(summaryRatio * usable))
    const counterE = Tokenizer.counter(limits.encoding)

    // ---- per-session cache and lock ------------------------------------------------------------
    const cache = new Map<SessionId, Entry>()
    const locks = new Map<SessionId, { readonly semaphore: Effect.Semaphore; users: number }>()
    const withLock = <A, E, R>(sessionId: SessionId, effect: Effect.Effect<A, E, R>) =>
      Effect.acquireUseRelease(
        Effect.sync(() => {
          let lock = locks.get(sessionId)
          if (lock === undefined) {
            lock = { semaphore: Effect.unsafeMakeSemaphore(1), users: 0 }
            locks.set(sessionId, lock)
          }
          lock.users++
          return lock
        }),
        (lock) => lock.semaphore.withPermits(1)(effect),
        (lock) =>
          Effect.sync(() => {
            if (--lock.users === 0) locks.delete(sessionId)
          })
      )
    const remember = (sessionId: SessionId, entry: Entry) => {
      cache.delete(sessionId)
      cache.set(sessionId, entry)
      if (cache.size > maxSessions) cache.delete(cache.keys().next().value!)
    }

    // ---- reading the prompt history ------------------------------------------------------------
    /** The session and its ancestors, oldest first (history order). */
    const chainOf = (session: Session): Effect.Effect<Array<Session>, JournalError | NotFound> =>
      session.parentId === null
        ? Effect.succeed([session])
        : Effect.map(Effect.flatMap(requireSession(journal, session.parentId), chainOf), (ancestors) => [
            ...ancestors,
            session
          ])

    /** The whole prompt history: each ancestor's events up to where its child branched, then the session's. */
    const fullHistory = (chain: ReadonlyArray<Session>): Effect.Effect<Array<TapeEvent>, JournalError> =>
      Effect.gen(function* () {
        const out: Array<TapeEvent> = []
        for (let i = 0; i < chain.length; i++) {
          const s = chain[i]!
          const uptoSeq = chain[i + 1]?.parentSeq ?? undefined
          for (const e of yield* journal.readTape(s.id, { afterSeq: s.historyFromSeq, uptoSeq })) out.push(e)
        }
        return out
      })

    /**
     * The end of the session's own tape back to its last compaction (read in pages from the head),
     * or, when there is none or the last marker is a restore, the whole prompt history.
     */
    const recentHistory = (session: Session, chain: ReadonlyArray<Session>) =>
      Effect.gen(function* () {
        const head = yield* journal.headSeq(session.id)
        let events: Array<TapeEvent> = []
        let upto = head
        while (upto > session.historyFromSeq) {
          const from = Math.max(session.historyFromSeq, upto - PAGE)
          const page = yield* journal.readTape(session.id, { afterSeq: from, uptoSeq: upto })
          events = [...page, ...events]
          upto = from
          const marker = events.findLast((e) => e._tag === "CompactionApplied" || e._tag === "CheckpointRestored")
          if (marker?._tag === "CheckpointRestored") break
          if (marker?._tag === "CompactionApplied" && (events[0]?.tapeSeq ?? 0) <= marker.toSeq + 1) {
            return { events, head }
          }
        }
        const whole = upto <= session.historyFromSeq && chain.length === 1
        return { events: whole ? events : yield* fullHistory(chain), head }
      })

    // ---- keeping a session's view up to date ---------------------------------------------------
    const newEntry = (session: Session, ranks: Ranks, events: ReadonlyArray<TapeEvent>, lastSeq: number): Entry => {
      const entry: Entry = {
        sessionId: session.id,
        key: sessionKey(session),
        ranks,
        view: build(events, events.length, ranks),
        lastSeq: Math.max(lastSeq, session.historyFromSeq),
        instructions: undefined,
        tools: [],
        fixedTokens: Tokenizer.TOKENS_PER_REPLY
      }
      remember(session.id, entry)
      return entry
    }

    const coldEntry = (session: Session) =>
      Effect.gen(function* () {
        const chain = yield* chainOf(session)
        const { events, head } = yield* recentHistory(session, chain)
        return newEntry(session, new Ranks(chain.map((s) => s.id)), events, head)
      })

    /**
     * The loop's history when it is the session's whole prompt history as the tape holds it: not a
     * branch, its first event right after `historyFromSeq`, all the session's own, gap-free. Folded
     * whole it gives the view `coldEntry` builds from a read (which folds the whole history too
     * when there is no compaction marker, and a suffix that a marker makes equivalent otherwise);
     * `catchUp` then reads only what the tape holds beyond its end.
     */
    const wholeHistory = (session: Session, history: ReadonlyArray<TapeEvent> | undefined) => {
      if (history === undefined || session.parentId !== null || history[0]?.tapeSeq !== session.historyFromSeq + 1)
        return undefined
      for (let i = 0; i < history.length; i++) {
        const e = history[i]!
        if (e.sessionId !== session.id || e.tapeSeq !== session.historyFromSeq + 1 + i) return undefined
      }
      return history
    }

    /** The session's cached entry, else one built from the loop's history when whole (no read), else read. */
    const entryFor = (session: Session, history?: ReadonlyArray<TapeEvent>) =>
      Effect.suspend(() => {
        const cached = cache.get(session.id)
        if (cached !== undefined && cached.key === sessionKey(session)) {
          remember(session.id, cached)
          return Effect.succeed(cached)
        }
        const whole = wholeHistory(session, history)
        if (whole !== undefined)
          return Effect.succeed(newEntry(session, new Ranks([session.id]), whole, whole.at(-1)!.tapeSeq))
        return coldEntry(session)
      })

    /** Fold events into the entry; `false` when a restore needs the whole history instead. */
    const fold = (entry: Entry, events: Iterable<TapeEvent>): boolean => {
      try {
        for (const e of events) {
          entry.view = step(entry.view, e, entry.ranks, () => {
            throw new NeedsRebuild()
          })
          if (e.sessionId === entry.sessionId) entry.lastSeq = Math.max(entry.lastSeq, e.tapeSeq)
        }
        return true
      } catch (error) {
        if (error instanceof NeedsRebuild) return false
        throw error
      }
    }

    /** Bring the view up to the journal's head: the loop's new events first, then anything else. */
    const catchUp = (session: Session, entry: Entry, history: ReadonlyArray<TapeEvent> | undefined) =>
      Effect.gen(function* () {
        if (history !== undefined) {
          // The loop's history ends with the session's newest events: take them if they follow on.
          let i = history.length
          while (i > 0 && history[i - 1]!.sessionId === session.id && history[i - 1]!.tapeSeq > entry.lastSeq) i--
          const fresh = history.slice(i)
          const contiguous = fresh.every((e, k) => e.tapeSeq === entry.lastSeq + k + 1)
          if (fresh.length > 0 && contiguous && !fold(entry, fresh)) return yield* rebuild(session, entry)
        }
        const head = yield* journal.headSeq(session.id)
        if (head <= entry.lastSeq) return entry
        const gap = yield* journal.readTape(session.id, { afterSeq: entry.lastSeq, uptoSeq: head })
        if (!fold(entry, gap)) return yield* rebuild(session, entry)
        entry.lastSeq = Math.max(entry.lastSeq, head)
        return entry
      })

    const rebuild = (session: Session, entry: Entry) =>
      Effect.gen(function* () {
        const chain = yield* chainOf(session)
        const events = yield* fullHistory(chain)
        entry.view = build(events, events.length, entry.ranks)
        entry.lastSeq = Math.max(
          session.historyFromSeq,
          events.findLast((e) => e.sessionId === session.id)?.tapeSeq ?? 0
        )
        return entry
      })

    const setFixed = (
      entry: Entry,
      counter: Tokenizer.Counter,
      instructions: string | undefined,
      tools: ReadonlyArray<ToolSpec>
    ) => {
      if (entry.instructions === instructions && entry.tools === tools) return
      entry.instructions = instructions
      entry.tools = tools
      let n = Tokenizer.TOKENS_PER_REPLY
      if (instructions !== undefined && instructions.length > 0)
        n += Tokenizer.TOKENS_PER_MESSAGE + counter.count(instructions)
      for (const t of tools) n += Tokenizer.toolTokens(counter, t)
      entry.fixedTokens = n
    }

    // ---- compaction ----------------------------------------------------------------------------
    const pinnedOf = (checkpointId: string) =>
      Effect.map(journal.getCheckpoint(checkpointId), (found) =>
        Option.match(found, {
          onNone: (): ReadonlyArray<Pinned> => [],
          onSome: (c) =>
            Either.match(Schema.decodeUnknownEither(Compactor.CheckpointState)(c.state), {
              onLeft: (): ReadonlyArray<Pinned> => [],
              onRight: (s) => s.pinned
            })
        })
      )

    /**
     * Ask the session's model for a summary; the text, or why there is none, and the tokens the call
     * used (reported by the model as it went, so a call that fails part-way still counts).
     */
    const ask = (model: ModelService, request: ModelRequest, usage: { inputTokens: number; outputTokens: number }) =>
      Effect.gen(function* () {
        let text = ""
        const cap = summaryTokens * 16
        const outcome = yield* runInto(model, request, (event) =>
          Effect.sync(() => {
            if (event.type === "text-delta" && text.length < cap) text += event.text
            else if (event.type === "usage") {
              usage.inputTokens += event.inputTokens
              usage.outputTokens += event.outputTokens
            }
          })
        ).pipe(
          Effect.timeout(summaryTimeout),
          Effect.either,
          // A model that breaks (a defect) costs the summary, never the run.
          Effect.catchAllDefect((defect) => Effect.succeed(Either.left(defect)))
        )
        if (Either.isLeft(outcome)) {
          const e = outcome.left
          return Either.left(
            `the model could not write a summary: ${Cause.isTimeoutException(e) ? "timed out" : e instanceof Error ? e.message : String(e)}`
          )
        }
        return Either.right(text.trim())
      })

    const compactLocked = (session: Session, entry: Entry, o: Compactor.CompactOptions) =>
      Effect.gen(function* () {
        const view = entry.view
        const sessionId = session.id
        if (view.openApprovals.size > 0) {
          return yield* new Conflict({
            message: `session ${sessionId} has a pending approval: compaction waits for it`
          })
        }
        const waiting = yield* journal.listRuns({ sessionId, states: ["WaitingForApproval"] })
        if (waiting.length > 0) {
          return yield* new Conflict({
            message: `session ${sessionId} has a run waiting for approval: compaction waits for it`
          })
        }
        const counter = yield* counterE
        const tokensBefore = entry.fixedTokens + viewTokens(counter, view)
        const keepTokens = Math.max(0, Math.floor(targetRatio * usable) - entry.fixedTokens - summaryTokens)
        const cut = planCut(view, {
          sessionId,
          keepTurns,
          keepTokens,
          tokensOf: (s) => stepTokens(counter, s)
        })
        if (cut === undefined)
          return yield* new Conflict({ message: `session ${sessionId} has nothing to compact yet` })
        const covered = view.steps.slice(0, cut.index)
        const kept = view.steps.slice(cut.index)
        const coveredKey = entry.ranks.key(sessionId, cut.toSeq)
        const previous = view.summary === undefined ? undefined : bodyOf(view.summary.event.summary)
        const carried = view.summary === undefined ? [] : yield* pinnedOf(view.summary.event.checkpointId)
        const newlyPinned = view.notes
          .filter((n) => n.key <= coveredKey)
          .map((n) => ({ seq: n.event.tapeSeq, author: n.event.author, text: n.event.text }))
        const pinned = capPinned(counter, [...carried, ...newlyPinned], Math.floor(summaryTokens * 0.3))
        const facts = mustKeep(counter, previous, covered, pinned, Math.floor(summaryTokens * 0.6))
        const request = compactionRequest(counter, { previous, covered, facts, summaryTokens, maxPromptTokens: usable })
        const usage = { inputTokens: 0, outputTokens: 0 }
        const written = yield* ask(options.modelFor?.(session.agentId) ?? model, request, usage)
        const rejected = Either.isLeft(written) ? written.left : verify(counter, written.right, facts, summaryTokens)
        const summarizer: "model" | "extractive" = rejected === undefined ? "model" : "extractive"
        const body =
          rejected === undefined && Either.isRight(written)
            ? written.right
            : extractive(counter, previous, covered, facts, summaryTokens)
        const summary = body + pinnedSection(pinned)
        const summaryMessageTokens = Tokenizer.messageTokens(counter, {
          role: "system",
          text: SUMMARY_PREFIX + summary
        })
        let tokensAfter = entry.fixedTokens + summaryMessageTokens
        for (const s of kept) tokensAfter += stepTokens(counter, s)
        const fromSeq = (view.summary?.event.toSeq ?? session.historyFromSeq) + 1
        const result = {
          applied: false,
          sessionId,
          fromSeq,
          toSeq: cut.toSeq,
          summary,
          strategy: Compactor.STRATEGY,
          summarizer,
          rejected,
          tokensBefore,
          tokensAfter,
          checkpointId: undefined,
          event: undefined
        } satisfies Compactor.Compaction
        if (o.preview) return result as Compactor.Compaction
        if (rejected !== undefined)
          yield* Effect.logInfo("compaction: model summary refused, extractive used", { rejected })
        const at = yield* Clock.currentTimeMillis
        const checkpointId = yield* ulid
        const state: Compactor.CheckpointState = {
          version: 1,
          strategy: Compactor.STRATEGY,
          summarizer,
          historyFromSeq: session.historyFromSeq,
          resetGeneration: session.resetGeneration,
          restoredSeq: entry.lastSeq,
          tokensBefore,
          tokensAfter,
          pinned
        }
        const [stored] = yield* append(
          sessionId,
          [
            {
              _tag: "CompactionApplied",
              sessionId,
              runId: o.runId ?? null,
              at,
              summary,
              fromSeq,
              toSeq: cut.toSeq,
              checkpointId,
              strategy: Compactor.STRATEGY,
              summarizer,
              tokensBefore,
              tokensAfter
            },
            // The summary call is the session's spending too: on the tape, and in its token counter
            // (which `maxTokensPerSession` checks).
            ...(usage.inputTokens + usage.outputTokens > 0
              ? [{ _tag: "Usage" as const, sessionId, runId: o.runId ?? null, at, turn: 0, ...usage }]
              : [])
          ],
          {
            addTokens: usage.inputTokens + usage.outputTokens,
            createCheckpoint: {
              id: checkpointId,
              sessionId,
              fromSeq,
              toSeq: cut.toSeq,
              summary,
              state,
              createdAt: at
            }
          }
        )
        yield* catchUp(session, entry, undefined)
        if (options.factsFile !== undefined) yield* writeFacts(sessionId, o.runId ?? null, summary, options.factsFile)
        return {
          ...result,
          applied: true,
          checkpointId,
          event: stored as TapeEventOf<"CompactionApplied">
        } satisfies Compactor.Compaction as Compactor.Compaction
      }).pipe(
        Effect.withSpan("ContextEngine.compact", { attributes: { sessionId: session.id }, captureStackTrace: false })
      )

    /** Facts to the workspace file, journaled; a failure is a note, never a failed compaction. */
    const writeFacts = (
      sessionId: SessionId,
      runId: RunId | null,
      summary: string,
      target: { readonly root: string; readonly file: string }
    ) =>
      FactsFile.write({ ...target, facts: FactsFile.factsOf(summary) }).pipe(
        Effect.map((w) => (w.written ? `${w.path}: ${w.facts} facts written, sha256:${w.sha256}` : undefined)),
        Effect.catchAll((e) => Effect.succeed(`${target.file}: facts not written: ${e.message}`)),
        Effect.flatMap((text) =>
          text === undefined
            ? Effect.void
            : Effect.flatMap(Clock.currentTimeMillis, (at) =>
                append(sessionId, [{ _tag: "SessionNote", sessionId, runId, at, author: "facts", text }])
              ).pipe(Effect.asVoid)
        ),
        Effect.catchAll((e) => Effect.logWarning("could not journal the facts file", e))
      )

    // ---- the assembler -------------------------------------------------------------------------
    const assemble: PromptAssembler.Service["assemble"] = (input) =>
      withLock(
        input.session.id,
        Effect.gen(function* () {
          const counter = yield* counterE
          const entry = yield* entryFor(input.session, input.history)
          yield* catchUp(input.session, entry, input.history)
          setFixed(entry, counter, input.instructions, input.tools)
          let tokens = entry.fixedTokens + viewTokens(counter, entry.view)
          const v = entry.view
          if (
            autoCompact &&
            tokens >= minInputTokens &&
            tokens > triggerRatio * usable &&
            v.openApprovals.size === 0 &&
            (v.turnsSinceMarker >= cooldownTurns || tokens > usable)
          ) {
            yield* compactLocked(input.session, entry, { runId: input.runId }).pipe(
              Effect.catchAll((e) =>
                Effect.logInfo("compaction skipped", { sessionId: input.session.id, reason: e.message })
              )
            )
            tokens = entry.fixedTokens + viewTokens(counter, entry.view)
          }
          const request: ModelRequest = {
            instructions: input.instructions,
            messages: render(entry.view),
            tools: input.tools
          }
          // Attachments count against the window (above); the kernel's `Attachments.resolving` adds
          // them to the prompt and to its estimate.
          return { request, estimatedTokens: tokens - viewAttachmentTokens(entry.view) }
        })
      )

    // ---- the compactor -------------------------------------------------------------------------
    const compact: Compactor.Service["compact"] = (sessionId, o = {}) =>
      withLock(
        sessionId,
        Effect.gen(function* () {
          const session = yield* requireSession(journal, sessionId)
          const entry = yield* entryFor(session)
          yield* catchUp(session, entry, undefined)
          return yield* compactLocked(session, entry, o)
        })
      )

    const decodeState = (c: { readonly id: string; readonly state: unknown }) =>
      Schema.decodeUnknown(Compactor.CheckpointState)(c.state).pipe(
        Effect.mapError(
          (cause) =>
            new JournalError({ method: "getCheckpoint", message: `checkpoint ${c.id} has an unreadable state`, cause })
        )
      )

    const restore: Compactor.Service["restore"] = (sessionId, checkpointId, o = {}) =>
      Effect.gen(function* () {
        const id = yield* Schema.decodeUnknown(Compactor.CheckpointId)(checkpointId).pipe(
          Effect.mapError(() => new InvalidArgument({ message: "checkpointId must be a ULID", field: "checkpointId" }))
        )
        const found = yield* journal.getCheckpoint(id)
        if (Option.isNone(found) || found.value.sessionId !== sessionId) {
          return yield* new NotFound({ entity: "checkpoint", id })
        }
        const state = yield* decodeState(found.value)
        return yield* withLock(
          sessionId,
          Effect.gen(function* () {
            const session = yield* requireSession(journal, sessionId)
            const active = yield* journal.listRuns({ sessionId, states: ACTIVE })
            if (active.length > 0) {
              return yield* new Conflict({
                message: `session ${sessionId} has a run that has not ended: restore after it`
              })
            }
            const at = yield* Clock.currentTimeMillis
            const restored =
              session.historyFromSeq === state.historyFromSeq
                ? session
                : { ...session, historyFromSeq: state.historyFromSeq, updatedAt: at }
            if (restored !== session) yield* journal.updateSession(restored)
            const [event] = yield* append(sessionId, [
              {
                _tag: "CheckpointRestored",
                sessionId,
                runId: null as RunId | null,
                at,
                checkpointId: id,
                restoredSeq: state.restoredSeq,
                historyFromSeq: state.historyFromSeq,
                by: o.by ?? "system"
              }
            ])
            cache.delete(sessionId)
            return { event: event as TapeEventOf<"CheckpointRestored">, session: restored }
          })
        )
      }).pipe(Effect.withSpan("ContextEngine.restore", { attributes: { sessionId }, captureStackTrace: false }))

    const listCheckpoints: Compactor.Service["listCheckpoints"] = (sessionId) =>
      Effect.gen(function* () {
        yield* requireSession(journal, sessionId)
        const stored = yield* journal.listCheckpoints(sessionId)
        return yield* Effect.forEach(stored, (c) =>
          Effect.map(
            decodeState(c),
            (s): Compactor.CheckpointInfo => ({
              id: c.id,
              sessionId: c.sessionId,
              fromSeq: c.fromSeq,
              toSeq: c.toSeq,
              summary: c.summary,
              createdAt: c.createdAt,
              strategy: s.strategy,
              summarizer: s.summarizer,
              historyFromSeq: s.historyFromSeq,
              resetGeneration: s.resetGeneration,
              restoredSeq: s.restoredSeq,
              tokensBefore: s.tokensBefore,
              tokensAfter: s.tokensAfter,
              pinnedNotes: s.pinned.length
            })
          )
        )
      })

    return {
      assembler: { assemble },
      compactor: { compact, restore, listCheckpoints },
      limits,
      countRequest: (request) => Effect.map(counterE, (c) => Tokenizer.requestTokens(c, request))
    }
  })

/**
 * The assembler alone, over the context's `Journal` and `ModelProvider`.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const assembler = (
  options: Options = {}
): Effect.Effect<PromptAssembler.Service, InvalidArgument, Journal | ModelProvider> =>
  Effect.map(engineOf(options), (e) => e.assembler)

const engineOf = (options: Options) =>
  Effect.flatMap(
    Effect.all({
      journal: Journal,
      model: ModelProvider,
      agents: Effect.serviceOption(AgentRegistry),
      live: Effect.serviceOption(LiveTape)
    }),
    ({ agents, journal, model, live }) =>
      make({
        ...options,
        journal,
        model,
        append: options.append ?? Option.getOrUndefined(live)?.append,
        modelFor: (agentId) =>
          Option.getOrUndefined(
            Option.map(
              Option.flatMap(agents, (registry) => registry.get(agentId)),
              (a) => a.models[0]
            )
          )
      })
  )

/**
 * The assembler and the compactor of one engine (they share its per-session views), over the
 * context's `Journal` and `ModelProvider`.
 *
 * @since 0.1.0
 * @category Layers
 */
export const layer = (
  options: Options = {}
): Layer.Layer<PromptAssembler.PromptAssembler | Compactor.Compactor, InvalidArgument, Journal | ModelProvider> =>
  Layer.effectContext(
    Effect.map(engineOf(options), (e) =>
      Context.make(PromptAssembler.PromptAssembler, e.assembler).pipe(Context.add(Compactor.Compactor, e.compactor))
    )
  )
