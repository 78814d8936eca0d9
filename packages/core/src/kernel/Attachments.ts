/**
 * Attachments of user messages: images (PNG, JPEG, GIF, WebP) and text files.
 *
 * - **Admission** (`admit`, called by the Gateway before a run is accepted): each attachment's type
 *   is **sniffed from its bytes** (the four image signatures; otherwise valid UTF-8 without NUL bytes
 *   is text) — the declared type only names a text file's subtype; anything else is refused. Sizes
 *   are limited per attachment and per message (`PayloadTooLarge`). Images need a model that accepts
 *   them (`ModelLimits`' `images`, overridable): else `InvalidArgument` "model X does not accept
 *   images". Text is redacted (the same rules as the journal) before it is stored.
 * - **Storage**: bytes go to the `BlobStore` under their SHA-256; the run's `RunAccepted` and its
 *   `UserMessage` carry only `{ digest, mediaType, size, name }`.
 * - **Prompt** (`resolving`, a `PromptAssembler` decorator the kernel always applies): images become
 *   `images` of their user message (AI SDK file parts for the provider); text files follow the message
 *   fenced as untrusted data.
 *
 * @since 0.1.0
 */
import { basename } from "node:path"
import { Context, Effect, Layer, Metric, Option } from "effect"
import * as ModelLimits from "../adapters/context/ModelLimits.js"
import { attachmentTokens } from "../adapters/context/Tokenizer.js"
import { InvalidArgument, type JournalError, NotFound, PayloadTooLarge } from "../domain/Errors.js"
import type { RunId } from "../domain/Ids.js"
import { CurrentRedactor } from "../domain/Redaction.js"
import type { Attachment, TapeEvent } from "../domain/TapeEvent.js"
import { type Blob, type Service as BlobService, BlobStore } from "../ports/BlobStore.js"
import type { ImagePart, PromptMessage } from "../ports/ModelProvider.js"
import * as PromptAssembler from "./PromptAssembler.js"

/** An attachment as a caller sends it. @since 0.1.0 @category Models */
export interface Input {
  readonly data: Uint8Array
  /** A file name to show (default `attachment-N`). */
  readonly name?: string | undefined
  /** The declared media type: used only to name a text file's subtype (`text/markdown`, `application/json`). */
  readonly mediaType?: string | undefined
}

/** @since 0.1.0 @category Models */
export interface Limits {
  /** Largest attachment, in bytes (default 5 MiB). */
  readonly maxBytes?: number | undefined
  /** All attachments of one message together, in bytes (default 20 MiB). */
  readonly maxTotalBytes?: number | undefined
  /** Attachments per message (default 8). */
  readonly maxCount?: number | undefined
  /** Whether the models accept images (default: `ModelLimits` by model name). */
  readonly images?: boolean | undefined
}

/** Attachments stored, by `kind` (`image`, `text`). @since 0.1.0 @category Metrics */
export const storedTotal = Metric.counter("palyra_attachments", {
  description: "Message attachments accepted, by kind",
  incremental: true
})

/** The media types of images Palyra recognises. @since 0.1.0 @category Constants */
export const imageTypes = ["image/png", "image/jpeg", "image/gif", "image/webp"] as const

const startsWith = (bytes: Uint8Array, signature: ReadonlyArray<number>, at = 0) =>
  bytes.length >= at + signature.length && signature.every((b, i) => bytes[at + i] === b)

/**
 * The image type of bytes by their signature (PNG `89 50 4E 47 0D 0A 1A 0A`, JPEG `FF D8 FF`, GIF
 * `GIF87a`/`GIF89a`, WebP `RIFF….WEBP`), or `undefined`.
 *
 * @since 0.1.0
 * @category Parsing
 */
export const sniffImage = (bytes: Uint8Array): (typeof imageTypes)[number] | undefined => {
  if (startsWith(bytes, [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])) return "image/png"
  if (startsWith(bytes, [0xff, 0xd8, 0xff])) return "image/jpeg"
  if (startsWith(bytes, [0x47, 0x49, 0x46, 0x38]) && (bytes[4] === 0x37 || bytes[4] === 0x39) && bytes[5] === 0x61)
    return "image/gif"
  if (startsWith(bytes, [0x52, 0x49, 0x46, 0x46]) && startsWith(bytes, [0x57, 0x45, 0x42, 0x50], 8)) return "image/webp"
  return undefined
}

const textTypes = /^(text\/[\w.+-]+|application\/(json|xml|yaml|x-yaml|toml|[\w.+-]+\+(json|xml)))$/

/** The text of bytes that are valid UTF-8 without NUL bytes, else `undefined`. */
const asText = (bytes: Uint8Array): string | undefined => {
  if (bytes.includes(0)) return undefined
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes)
  } catch {
    return undefined
  }
}

const cleanName = (name: string | undefined, index: number) => {
  const base = [...basename((name ?? "").replace(/\\/g, "/"))]
    .filter((c) => c.charCodeAt(0) >= 0x20 && c.charCodeAt(0) !== 0x7f)
    .join("")
    .trim()
  return base.length === 0 || base === "." || base === ".." ? `attachment-${index + 1}` : base.slice(0, 255)
}

/** Whether every model by these names accepts images. @since 0.1.0 @category Predicates */
export const acceptsImages = (modelNames: ReadonlyArray<string>, override?: boolean): boolean =>
  override ?? modelNames.every((name) => ModelLimits.limitsFor(name).images)

/** @since 0.1.0 @category Models */
export interface AdmitOptions extends Limits {
  readonly blobs: BlobService
  /** The models that will answer (the session agent's, fail-over and routed ones included). */
  readonly modelNames: ReadonlyArray<string>
}

/**
 * Check, redact and store a message's attachments; their references for the tape (see the module
 * notes).
 *
 * @since 0.1.0
 * @category Constructors
 */
export const admit = (
  inputs: ReadonlyArray<Input>,
  options: AdmitOptions
): Effect.Effect<ReadonlyArray<Attachment>, InvalidArgument | PayloadTooLarge | JournalError> =>
  Effect.gen(function* () {
    if (inputs.length === 0) return []
    const maxBytes = options.maxBytes ?? 5 * 1024 * 1024
    const maxTotal = options.maxTotalBytes ?? 20 * 1024 * 1024
    const maxCount = options.maxCount ?? 8
    if (inputs.length > maxCount) {
      return yield* new InvalidArgument({
        message: `${inputs.length} attachments, over the limit of ${maxCount}`,
        field: "attachments"
      })
    }
    const total = inputs.reduce((n, a) => n + a.data.length, 0)
    if (total > maxTotal) return yield* new PayloadTooLarge({ what: "attachments", size: total, limit: maxTotal })
    const redactor = yield* CurrentRedactor
    // Check every attachment first: a message with one bad attachment stores nothing.
    const ready: Array<{ readonly bytes: Uint8Array; readonly mediaType: string; readonly name: string }> = []
    for (const [i, input] of inputs.entries()) {
      const name = cleanName(input.name, i)
      if (input.data.length > maxBytes) {
        return yield* new PayloadTooLarge({ what: `attachment ${name}`, size: input.data.length, limit: maxBytes })
      }
      if (input.data.length === 0) {
        return yield* new InvalidArgument({ message: `attachment ${name} is empty`, field: "attachments" })
      }
      const image = sniffImage(input.data)
      if (image !== undefined) {
        if (!acceptsImages(options.modelNames, options.images)) {
          return yield* new InvalidArgument({
            message: `model ${options.modelNames.join(", ")} does not accept images`,
            field: "attachments"
          })
        }
        ready.push({ bytes: input.data, mediaType: image, name })
        continue
      }
      const text = asText(input.data)
      if (text === undefined) {
        return yield* new InvalidArgument({
          message: `attachment ${name} is neither a PNG, JPEG, GIF or WebP image nor UTF-8 text`,
          field: "attachments"
        })
      }
      const declared = input.mediaType?.split(";")[0]?.trim().toLowerCase()
      const mediaType = declared !== undefined && textTypes.test(declared) ? declared : "text/plain"
      // Text is stored as the journal would store it: redacted.
      ready.push({ bytes: new TextEncoder().encode(redactor.redactString(text)), mediaType, name })
    }
    const out: Array<Attachment> = []
    for (const a of ready) {
      const stored = yield* options.blobs.put(a.bytes, a.mediaType)
      yield* Metric.increment(Metric.tagged(storedTotal, "kind", a.mediaType.startsWith("image/") ? "image" : "text"))
      out.push({ digest: stored.digest, mediaType: a.mediaType, size: stored.size, name: a.name })
    }
    return out
  }).pipe(Effect.withSpan("Attachments.admit", { attributes: { count: inputs.length }, captureStackTrace: false }))

/**
 * The attachments a run was admitted with, to copy onto its `UserMessage` (empty object when none).
 *
 * @since 0.1.0
 * @category Utils
 */
export const acceptedWith = (
  history: ReadonlyArray<TapeEvent>,
  runId: RunId
): { readonly attachments?: ReadonlyArray<Attachment> } => {
  for (let i = history.length - 1; i >= 0; i--) {
    const e = history[i]!
    if (e._tag === "RunAccepted" && e.runId === runId) {
      return e.attachments === undefined || e.attachments.length === 0 ? {} : { attachments: e.attachments }
    }
  }
  return {}
}

const escapeFenced = (text: string) => text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
const attr = (text: string) => escapeFenced(text).replace(/"/g, "&quot;")

/** How far a history array was scanned for attachments, and whether one was found. */
interface Scan {
  scanned: number
  found: boolean
}

const scans = new WeakMap<ReadonlyArray<TapeEvent>, Scan>()

/** Whether `e` is a user message with attachments (what the scan below looks for). @internal */
export const carriesAttachments = (e: TapeEvent): boolean => e._tag === "UserMessage" && e.attachments !== undefined

/**
 * Record that `history` holds (`found`) or does not hold a user message with attachments, as if it
 * had been scanned in full: the history cache knows it of the arrays it hands out (it checks each
 * event once, as it takes it in), so a run's first prompt does not scan the session's whole history.
 * @internal
 */
export const scanned = (history: ReadonlyArray<TapeEvent>, found: boolean): void => {
  scans.set(history, { scanned: history.length, found })
}

/**
 * Whether a user message of `history` has attachments. A run's history is one array it only appends
 * to (the loop pushes each committed event) and the prompt is assembled from it at every model call,
 * so the scan is remembered per array and resumed where it stopped: each event is looked at once per
 * run instead of once per model call. An array that got shorter is scanned again from the start.
 */
const hasAttachments = (history: ReadonlyArray<TapeEvent>): boolean => {
  let scan = scans.get(history)
  if (scan === undefined || scan.scanned > history.length) {
    scan = { scanned: 0, found: false }
    scans.set(history, scan)
  }
  if (scan.found) return true
  for (let i = scan.scanned; i < history.length; i++) {
    if (carriesAttachments(history[i]!)) {
      scan.found = true
      break
    }
  }
  scan.scanned = history.length
  return scan.found
}

/**
 * Decorate an assembler: user messages with attachments get their images and their text files (see
 * the module notes). A blob that is gone fails the call with `NotFound` (the tape names bytes the
 * store must keep).
 *
 * @since 0.1.0
 * @category Constructors
 */
export const resolving = (inner: PromptAssembler.Service, blobs: BlobService): PromptAssembler.Service => {
  const cache = new Map<string, Blob>()
  const load = (digest: string) =>
    Effect.gen(function* () {
      const cached = cache.get(digest)
      if (cached !== undefined) return cached
      const found = yield* blobs.get(digest)
      if (Option.isNone(found)) return yield* new NotFound({ entity: "attachment", id: digest })
      cache.set(digest, found.value)
      if (cache.size > 64) cache.delete(cache.keys().next().value!)
      return found.value
    })

  return {
    assemble: (input) =>
      // No attachment in the history (the common case): the inner assembler's effect as it is.
      !hasAttachments(input.history)
        ? inner.assemble(input)
        : Effect.gen(function* () {
            const assembled = yield* inner.assemble(input)
            const messages = [...assembled.request.messages]
            let tokens = assembled.estimatedTokens
            // Pair the tape's user messages with the prompt's from the end (a compaction may have dropped
            // older ones; decorators may have added to a message's text, never removed from it).
            let m = messages.length - 1
            for (let h = input.history.length - 1; h >= 0 && m >= 0; h--) {
              const e = input.history[h]!
              if (e._tag !== "UserMessage") continue
              while (m >= 0 && messages[m]!.role !== "user") m--
              const msg = messages[m]
              if (msg?.role !== "user" || !msg.text.startsWith(e.text)) break
              if (e.attachments !== undefined && e.attachments.length > 0) {
                const images: Array<ImagePart> = []
                let text = msg.text
                for (const a of e.attachments) {
                  tokens += attachmentTokens(a)
                  const blob = yield* load(a.digest)
                  if (a.mediaType.startsWith("image/")) {
                    images.push({ data: blob.bytes, mediaType: a.mediaType })
                    continue
                  }
                  const body = new TextDecoder().decode(blob.bytes)
                  text += `\n\n<attachment name="${attr(a.name)}" media-type="${attr(a.mediaType)}" sha256="${a.digest}" untrusted="true">\n${escapeFenced(body)}\n</attachment>`
                }
                const next: PromptMessage =
                  images.length === 0 ? { role: "user", text } : { role: "user", text, images }
                messages[m] = next
              }
              m--
            }
            return { request: { ...assembled.request, messages }, estimatedTokens: tokens }
          })
  }
}

/**
 * Wrap a `PromptAssembler` layer with `resolving`, over the context's `BlobStore`; everything else
 * `inner` provides passes through.
 *
 * @since 0.1.0
 * @category Layers
 */
export const layer = <ROut, E, RIn>(
  inner: Layer.Layer<ROut | PromptAssembler.PromptAssembler, E, RIn>
): Layer.Layer<ROut | PromptAssembler.PromptAssembler, E, RIn | BlobStore> =>
  Layer.flatMap(inner, (context) =>
    Layer.effectContext(
      Effect.map(BlobStore, (blobs) => {
        const assembler = Context.get(
          context as Context.Context<PromptAssembler.PromptAssembler>,
          PromptAssembler.PromptAssembler
        )
        return Context.add(context, PromptAssembler.PromptAssembler, resolving(assembler, blobs))
      })
    )
  )
