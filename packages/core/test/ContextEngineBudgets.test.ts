/**
 * What the context engine counts besides text: images of user messages in its window check (so a
 * session of big images compacts in time), and the tokens of a compaction's own summary call in the
 * session's usage (so `maxTokensPerSession` includes them).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Compactor, ContextEngine, Tokenizer } from "../src/context.js"
import {
  BlobStore,
  Caller,
  Gateway,
  Journal,
  MemoryJournal,
  PromptAssembler,
  ScriptedModel,
  type TapeEvent
} from "../src/index.js"
import { collect, gatewayLayer } from "../src/testing.js"

type Ev = TapeEvent.TapeEvent
type Request = Parameters<ScriptedModel.ScriptedModel["stream"]>[0]
const only = <T extends Ev["_tag"]>(events: ReadonlyArray<Ev>, tag: T) =>
  events.filter((e): e is TapeEvent.TapeEventOf<T> => e._tag === tag)

const alice = Caller.user("alice")
const WINDOW = 4_000
const RESERVE = 500
const USABLE = WINDOW - RESERVE
const isCompaction = (r: Request) => r.instructions?.startsWith(Compactor.COMPACTION_MARKER) === true
const png = Uint8Array.from(
  Buffer.from(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==",
    "base64"
  )
)

interface Harness {
  readonly gateway: Gateway.Service
  readonly journal: Journal.Service
  readonly engine: ContextEngine.ContextEngine
}

/** The real Gateway (attachments on, images accepted) with the context engine as its assembler. */
const withEngine = <A, E>(
  model: ScriptedModel.ScriptedModel,
  options: ContextEngine.Options,
  budgets: { readonly maxTokensPerSession?: number },
  body: (h: Harness) => Effect.Effect<A, E>
) =>
  Effect.gen(function* () {
    const journal = yield* MemoryJournal.make()
    const engine = yield* ContextEngine.make({
      journal,
      model,
      encoding: "o200k_base",
      contextWindow: WINDOW,
      outputReserve: RESERVE,
      minInputTokens: 200,
      ...options
    })
    const layer = gatewayLayer({
      model,
      blobs: BlobStore.memory(),
      attachments: { images: true },
      journal: Layer.succeed(Journal.Journal, journal),
      promptAssembler: Layer.succeed(PromptAssembler.PromptAssembler, engine.assembler),
      budgets: { maxModelTurns: 10, ...budgets }
    }) as Layer.Layer<Gateway.Gateway>
    return yield* Effect.flatMap(Gateway.Gateway, (gateway) => body({ gateway, journal, engine })).pipe(
      Effect.provide(layer),
      Effect.scoped
    )
  })

const turn = (gateway: Gateway.Service, text: string, attachments: ReadonlyArray<{ data: Uint8Array }> = []) =>
  Effect.gen(function* () {
    const { run, events } = yield* gateway.startRun(alice, {
      key: "s",
      text,
      ...(attachments.length === 0 ? {} : { attachments })
    })
    const seen = yield* collect(events)
    return { run, final: only(seen, "RunStateChanged").at(-1)?.to, error: only(seen, "RunError").at(0) }
  })

/** Answers turns briefly; writes a summary (with the usage it reports) when asked to compact. */
const model = (summaryUsage?: { inputTokens: number; outputTokens: number }) =>
  ScriptedModel.make((request) =>
    isCompaction(request)
      ? {
          text: "## Goal\nLook at pictures.\n## Decisions\n- none\n## Facts & identifiers\n- none\n## Files\n- none\n## Open work\n- none",
          ...(summaryUsage === undefined ? {} : { usage: summaryUsage })
        }
      : { text: "A picture, seen." }
  )

describe("ContextEngine budgets", () => {
  it.effect("images count in the window check: a session of images compacts before the prompt overflows", () =>
    Effect.gen(function* () {
      const m = model()
      yield* withEngine(m, {}, {}, (h) =>
        Effect.gen(function* () {
          // Each turn is a few text tokens and one image (IMAGE_TOKENS): text alone never nears the
          // trigger, the images pass the whole window by turn 5.
          for (let i = 1; i <= 12; i++) {
            const { final } = yield* turn(h.gateway, `picture ${i}`, [{ data: png }])
            assert.strictEqual(final, "Done")
          }
          const turns = m.prompts.filter((p) => !isCompaction(p))
          assert.strictEqual(turns.length, 12)
          assert.isAbove(12 * Tokenizer.IMAGE_TOKENS, USABLE)
          const session = (yield* h.journal.listSessions({}))[0]!
          const tape = yield* h.journal.readTape(session.id, { afterSeq: 0 })
          const requests = only(tape, "ModelRequest")
          for (const [i, prompt] of turns.entries()) {
            const images = prompt.messages.reduce(
              (n, msg) => n + (msg.role === "user" ? (msg.images?.length ?? 0) : 0),
              0
            )
            assert.isAtLeast(images, 1, `prompt ${i} carries its image`)
            const tokens = yield* h.engine.countRequest(prompt)
            assert.isAtMost(tokens, USABLE, `prompt ${i} has ${tokens} tokens (${images} images), over the window`)
            // The estimate on the tape (engine + attachments) is what the model got, counted once.
            assert.strictEqual(requests[i]!.estimatedTokens, tokens)
          }
          const compactions = only(tape, "CompactionApplied")
          assert.isAtLeast(compactions.length, 2)
          for (const c of compactions) assert.isAbove(c.tokensBefore, 0.8 * USABLE)
        })
      )
    })
  )

  it.effect("a compaction's summary call counts in the session's usage and against maxTokensPerSession", () =>
    Effect.gen(function* () {
      const m = model({ inputTokens: 30_000, outputTokens: 600 })
      yield* withEngine(m, { autoCompact: false, keepTurns: 1 }, { maxTokensPerSession: 20_000 }, (h) =>
        Effect.gen(function* () {
          for (let i = 1; i <= 4; i++) {
            const { final } = yield* turn(h.gateway, `turn ${i}: order ${i * 1_111} is at docs/o${i}.md`)
            assert.strictEqual(final, "Done")
          }
          const before = (yield* h.journal.listSessions({}))[0]!
          assert.strictEqual(before.tokensUsed, 0) // the scripted turns report no usage
          const compaction = yield* h.engine.compactor.compact(before.id)
          assert.isTrue(compaction.applied)
          const after = yield* Journal.requireSession(h.journal, before.id)
          assert.strictEqual(after.tokensUsed, 30_600)
          const tape = yield* h.journal.readTape(before.id, { afterSeq: 0 })
          const usage = only(tape, "Usage")
          assert.deepStrictEqual(
            usage.map((u) => [u.turn, u.inputTokens, u.outputTokens, u.tapeSeq]),
            [[0, 30_000, 600, compaction.event!.tapeSeq + 1]]
          )
          // The next turn's prompt is small, but the session has spent its budget on the summary.
          const next = yield* turn(h.gateway, "turn 5: anything else?")
          assert.strictEqual(next.final, "Failed")
          assert.strictEqual(next.error?.code, "budget_exceeded")
          assert.match(next.error?.message ?? "", /maxTokensPerSession/)
        })
      )
    })
  )

  it.effect("an automatic compaction's usage is on the tape with the run that triggered it", () =>
    Effect.gen(function* () {
      const m = model({ inputTokens: 900, outputTokens: 100 })
      yield* withEngine(m, {}, {}, (h) =>
        Effect.gen(function* () {
          let compactedBy: string | undefined
          for (let i = 1; i <= 8 && compactedBy === undefined; i++) {
            const { run, final } = yield* turn(h.gateway, `picture ${i}`, [{ data: png }])
            assert.strictEqual(final, "Done")
            const tape = yield* h.journal.readTape(run.sessionId, { afterSeq: 0 })
            compactedBy = only(tape, "CompactionApplied").at(0)?.runId ?? undefined
          }
          assert.isDefined(compactedBy)
          const session = (yield* h.journal.listSessions({}))[0]!
          const usage = only(yield* h.journal.readTape(session.id, { afterSeq: 0 }), "Usage")
          assert.deepStrictEqual(
            usage.map((u) => [String(u.runId), u.turn, u.inputTokens + u.outputTokens]),
            [[compactedBy, 0, 1_000]]
          )
          assert.strictEqual(session.tokensUsed, 1_000)
        })
      )
    })
  )
})
