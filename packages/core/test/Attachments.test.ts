import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Layer, Option } from "effect"
import {
  Attachments,
  BlobStore,
  Caller,
  Gateway,
  Ids,
  Journal,
  MemoryJournal,
  PromptAssembler,
  Records,
  ScriptedModel,
  type TapeEvent
} from "../src/index.js"
import { createPalyra, modelAdapter, toolAdapter } from "../src/promise/Palyra.js"
import { collect, gatewayLayer } from "../src/testing.js"
import { BuiltinTools } from "../src/tools.js"

const alice = Caller.user("alice")
// A 1×1 PNG, and the smallest well-formed headers of the other three.
const png = Uint8Array.from(
  Buffer.from(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==",
    "base64"
  )
)
const jpeg = Uint8Array.from([0xff, 0xd8, 0xff, 0xe0, 0, 0x10, 0x4a, 0x46, 0x49, 0x46])
const gif = new TextEncoder().encode("GIF89a\x01\x00\x01\x00")
const webp = Uint8Array.from([...new TextEncoder().encode("RIFF"), 4, 0, 0, 0, ...new TextEncoder().encode("WEBPVP8 ")])

const withGateway = <A, E>(
  options: { images?: boolean; maxBytes?: number; maxTotalBytes?: number },
  body: (g: Gateway.Service, blobs: BlobStore.Service, model: ScriptedModel.ScriptedModel) => Effect.Effect<A, E>
) =>
  Effect.gen(function* () {
    const blobs = BlobStore.memory()
    const model = ScriptedModel.make(() => ({ text: "seen" }))
    const layer = gatewayLayer({
      model,
      blobs,
      attachments: options,
      journal: Layer.effect(Journal.Journal, MemoryJournal.make())
    }) as Layer.Layer<Gateway.Gateway>
    return yield* Effect.flatMap(Gateway.Gateway, (g) => body(g, blobs, model)).pipe(
      Effect.provide(layer),
      Effect.scoped
    )
  })

describe("Attachments", () => {
  it("sniffs images from their bytes, never from the declared type", () => {
    assert.strictEqual(Attachments.sniffImage(png), "image/png")
    assert.strictEqual(Attachments.sniffImage(jpeg), "image/jpeg")
    assert.strictEqual(Attachments.sniffImage(gif), "image/gif")
    assert.strictEqual(Attachments.sniffImage(webp), "image/webp")
    assert.strictEqual(Attachments.sniffImage(new TextEncoder().encode("GIF89b")), undefined)
    assert.strictEqual(Attachments.sniffImage(new TextEncoder().encode("RIFF....WAVE")), undefined)
    assert.strictEqual(Attachments.sniffImage(new Uint8Array()), undefined)
  })

  it.effect("the blob store keeps one copy per digest", () =>
    Effect.gen(function* () {
      const blobs = BlobStore.memory()
      const a = yield* blobs.put(png, "image/png")
      const b = yield* blobs.put(Uint8Array.from(png), "image/png")
      assert.strictEqual(a.digest, BlobStore.digestOf(png))
      assert.deepStrictEqual([a.created, b.created], [true, false])
      const got = yield* blobs.get(a.digest)
      assert.deepStrictEqual(
        Option.map(got, (x) => [...x.bytes]),
        Option.some([...png])
      )
    })
  )

  it.effect("images and text reach the prompt by digest; the tape holds references only; text is redacted", () =>
    withGateway({ images: true }, (g, blobs, model) =>
      Effect.gen(function* () {
        const secret = "sk-abcdefghijklmnopqrstuvwxyz0123456789ABCD"
        const { session, events } = yield* g.startRun(alice, {
          key: "att",
          text: "what is in these?",
          attachments: [
            // Declared as text: the bytes say PNG.
            { data: png, name: "../../etc/shot.png", mediaType: "text/plain" },
            { data: new TextEncoder().encode(`# notes\nkey=${secret}\n`), name: "notes.md", mediaType: "text/markdown" }
          ]
        })
        const seen = yield* collect(events)
        const user = seen.find((e): e is TapeEvent.TapeEventOf<"UserMessage"> => e._tag === "UserMessage")!
        assert.deepStrictEqual(
          user.attachments?.map((a) => [a.name, a.mediaType, a.size]),
          [
            ["shot.png", "image/png", png.length],
            ["notes.md", "text/markdown", user.attachments![1]!.size]
          ]
        )
        assert.strictEqual(user.attachments![0]!.digest, BlobStore.digestOf(png))
        const text = yield* blobs.get(user.attachments![1]!.digest)
        const stored = new TextDecoder().decode(Option.getOrThrow(text).bytes)
        assert.notInclude(stored, secret)
        assert.include(stored, "# notes")
        // The prompt: the image as an image part with the same bytes, the text fenced after the message.
        const prompt = model.prompts[0]!.messages.at(-1)!
        assert.strictEqual(prompt.role, "user")
        if (prompt.role === "user") {
          assert.deepStrictEqual(
            prompt.images?.map((i) => [i.mediaType, [...i.data]]),
            [["image/png", [...png]]]
          )
          assert.match(
            prompt.text,
            /^what is in these\?\n\n<attachment name="notes.md" media-type="text\/markdown" sha256="[0-9a-f]{64}" untrusted="true">\n# notes/
          )
        }
        assert.notInclude(JSON.stringify(seen), secret)
        assert.strictEqual(session.principal, "alice")
      })
    )
  )

  it.effect("an attachment appended to a history already assembled from reaches the next prompt", () =>
    Effect.gen(function* () {
      // The decorator remembers how far it scanned each history array; a run's array only grows.
      const blobs = BlobStore.memory()
      const stored = yield* blobs.put(png, "image/png")
      const assembler = Attachments.resolving(PromptAssembler.fromHistory, blobs)
      const sessionId = yield* Ids.makeSessionId
      const runId = yield* Ids.makeRunId
      const session = Records.makeSession({ id: sessionId, principal: "alice" })
      const history: Array<TapeEvent.TapeEvent> = []
      const user = (tapeSeq: number, text: string, withImage: boolean): TapeEvent.TapeEvent => ({
        _tag: "UserMessage",
        sessionId,
        runId,
        tapeSeq,
        at: tapeSeq,
        text,
        ...(withImage
          ? { attachments: [{ digest: stored.digest, mediaType: "image/png", size: stored.size, name: "a.png" }] }
          : {})
      })
      const input = { session, runId, history, instructions: undefined, tools: [] }
      history.push(user(1, "first", false))
      const before = yield* assembler.assemble(input)
      const imagesOf = (a: PromptAssembler.Assembled) =>
        a.request.messages.map((m) => (m.role === "user" ? (m.images?.length ?? 0) : 0))
      assert.deepStrictEqual(imagesOf(before), [0])
      history.push(user(2, "second", true))
      const after = yield* assembler.assemble(input)
      assert.deepStrictEqual(imagesOf(after), [0, 1])
      assert.isAbove(after.estimatedTokens, (yield* PromptAssembler.fromHistory.assemble(input)).estimatedTokens)
    })
  )

  it.effect(
    "an earlier turn's image stays in a session's later prompts (the history cache's arrays); another session has none",
    () =>
      withGateway({ images: true }, (g, _blobs, model) =>
        Effect.gen(function* () {
          const turn = (key: string, text: string, attachments?: ReadonlyArray<{ data: Uint8Array }>) =>
            Effect.flatMap(g.startRun(alice, { key, text, ...(attachments ? { attachments } : {}) }), (r) =>
              collect(r.events)
            )
          const imagesOf = (i: number) =>
            model.prompts[i]!.messages.flatMap((m) => (m.role === "user" ? [m.images?.length ?? 0] : []))
          yield* turn("plain", "hello")
          yield* turn("pic", "what is this?", [{ data: png }])
          // The session's later turns take their history from the cache (no tape read): the image stays.
          yield* turn("pic", "and now?")
          yield* turn("pic", "and again?")
          yield* turn("plain", "hello again")
          assert.deepStrictEqual(imagesOf(0), [0])
          assert.deepStrictEqual(imagesOf(1), [1])
          assert.deepStrictEqual(imagesOf(2), [1, 0])
          assert.deepStrictEqual(imagesOf(3), [1, 0, 0])
          assert.deepStrictEqual(imagesOf(4), [0, 0])
        })
      )
  )

  it.effect("refusals: a model without images, oversize attachments, binary files — typed, before any run", () =>
    Effect.gen(function* () {
      yield* withGateway({}, (g) =>
        Effect.gen(function* () {
          const exit = yield* Effect.exit(g.sendMessage(alice, { text: "look", attachments: [{ data: png }] }))
          assert.isTrue(Exit.isFailure(exit))
          const error = Exit.isFailure(exit) ? exit.cause : undefined
          assert.match(String(error), /InvalidArgument.*model scripted does not accept images/s)
          // Text is fine for such a model.
          const ok = yield* g.sendMessage(alice, {
            text: "read",
            attachments: [{ data: new TextEncoder().encode("hi") }]
          })
          assert.strictEqual(ok.run.state, "Accepted")
        })
      )
      yield* withGateway({ images: true, maxBytes: 64, maxTotalBytes: 100 }, (g, blobs) =>
        Effect.gen(function* () {
          const big = yield* Effect.flip(
            g.sendMessage(alice, { text: "x", attachments: [{ data: new Uint8Array(65).fill(65) }] })
          )
          assert.strictEqual(big._tag, "PayloadTooLarge")
          const total = yield* Effect.flip(
            g.sendMessage(alice, {
              text: "x",
              attachments: [{ data: new Uint8Array(60).fill(65) }, { data: new Uint8Array(60).fill(65) }]
            })
          )
          assert.strictEqual(total._tag, "PayloadTooLarge")
          const binary = yield* Effect.flip(
            g.sendMessage(alice, {
              text: "x",
              attachments: [{ data: new TextEncoder().encode("fine") }, { data: Uint8Array.from([0, 1, 2, 3]) }]
            })
          )
          // Nothing was stored for the message: not even its good attachment.
          assert.isTrue(Option.isNone(yield* blobs.get(BlobStore.digestOf(new TextEncoder().encode("fine")))))
          assert.strictEqual(binary._tag, "InvalidArgument")
          const runs = yield* g.listRuns(alice, {})
          assert.strictEqual(runs.length, 0)
        })
      )
    })
  )

  it("the Promise API resolves context references when asked to", async () => {
    const root = mkdtempSync(join(tmpdir(), "palyra-promise-refs-"))
    writeFileSync(join(root, "plan.md"), "Step 1: ship.\n")
    const model = ScriptedModel.make(() => ({ text: "ok" }))
    const palyra = createPalyra({
      model: modelAdapter(model),
      tools: BuiltinTools.fsTools({ root }).map(toolAdapter),
      references: { workspace: root }
    })
    try {
      await palyra.run("follow @file:plan.md and @file:../escape.md")
      const last = model.prompts[0]!.messages.at(-1)!
      const text = last.role === "user" ? last.text : ""
      assert.include(text, "Step 1: ship.")
      assert.include(text, 'target="../escape.md" status="refused"')
    } finally {
      await palyra.close()
    }
  })

  it("the Promise API takes Uint8Array attachments", async () => {
    const model = ScriptedModel.make(() => ({ text: "a cat" }))
    const palyra = createPalyra({ model: modelAdapter(model), attachments: { images: true } })
    try {
      const result = await palyra.run("what is this?", { attachments: [{ data: png, name: "cat.png" }] })
      assert.strictEqual(result.text, "a cat")
      const last = model.prompts[0]!.messages.at(-1)!
      assert.deepStrictEqual(last.role === "user" ? last.images?.map((i) => i.data.length) : [], [png.length])
    } finally {
      await palyra.close()
    }
  })
})
