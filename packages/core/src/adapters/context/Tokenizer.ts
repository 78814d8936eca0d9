/**
 * Token counting for prompts. OpenAI-family models are counted exactly with their real BPE encoding
 * (`o200k_base` or `cl100k_base`, from `gpt-tokenizer`: pure JavaScript, no wasm, no download); the
 * encoding loads lazily, on the first count, so importing this module costs nothing (the tables take
 * about 170 ms to load, once per process).
 *
 * Other models (Claude, Llama, …) have no public tokenizer that runs here, so they get a documented
 * approximation that errs on the high side: ASCII characters count 1 / 3.5 of a token, every other
 * UTF-16 code unit a whole token (CJK text and emoji are about one token a character), and the total
 * is raised by a 10% safety margin.
 *
 * Message framing follows OpenAI's chat format: 3 tokens per message, 3 to prime the reply, and the
 * JSON of tool calls and tool schemas counted as text.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { ModelRequest, PromptMessage, ToolSpec } from "../../ports/ModelProvider.js"

/** The encodings Palyra can count with. @since 0.1.0 @category Models */
export type Encoding = "o200k_base" | "cl100k_base" | "approximate"

/** A loaded token counter. @since 0.1.0 @category Models */
export interface Counter {
  readonly encoding: Encoding
  /** Tokens of a text (exact for BPE encodings; an upper-leaning estimate for `approximate`). */
  readonly count: (text: string) => number
}

/** Tokens of framing per message (OpenAI chat format). @since 0.1.0 @category Constants */
export const TOKENS_PER_MESSAGE = 3
/** Tokens that prime the model's reply. @since 0.1.0 @category Constants */
export const TOKENS_PER_REPLY = 3

/**
 * The approximation for models without a local tokenizer: ASCII / 3.5 + other code units × 1, plus
 * 10%, rounded up.
 *
 * @since 0.1.0
 * @category Counting
 */
export const approximateCount = (text: string): number => {
  let ascii = 0
  let other = 0
  for (let i = 0; i < text.length; i++) {
    if (text.charCodeAt(i) < 128) ascii++
    else other++
  }
  return Math.ceil((ascii / 3.5 + other) * 1.1)
}

/** The counter of the approximation (needs no loading). @since 0.1.0 @category Counting */
export const approximate: Counter = { encoding: "approximate", count: approximateCount }

// Special-token text in untrusted input (e.g. "<|endoftext|>") is counted as plain text, never refused.
const plain = { disallowedSpecial: new Set<string>() }
const loaded = new Map<Encoding, Promise<Counter>>()
const load = (encoding: "o200k_base" | "cl100k_base"): Promise<Counter> => {
  let p = loaded.get(encoding)
  if (p === undefined) {
    const module =
      encoding === "o200k_base"
        ? import("gpt-tokenizer/encoding/o200k_base")
        : import("gpt-tokenizer/encoding/cl100k_base")
    p = module.then((m) => ({
      encoding,
      count: (text: string) => (text.length === 0 ? 0 : m.countTokens(text, plain))
    }))
    loaded.set(encoding, p)
  }
  return p
}

/**
 * A counter for an encoding, loading the BPE tables on first use (then shared by the process).
 *
 * @since 0.1.0
 * @category Counting
 */
export const counter = (encoding: Encoding): Effect.Effect<Counter> =>
  encoding === "approximate" ? Effect.succeed(approximate) : Effect.promise(() => load(encoding))

const argsText = (args: unknown): string => {
  if (typeof args === "string") return args
  try {
    return JSON.stringify(args) ?? ""
  } catch {
    return String(args)
  }
}

/**
 * What one image is counted as: OpenAI's cost of a 1024×1024 image in high detail (85 + 4 × 170),
 * a fair upper estimate for other providers' typical images.
 *
 * @since 0.1.0
 * @category Constants
 */
export const IMAGE_TOKENS = 765

/**
 * Tokens a message attachment adds to its prompt: `IMAGE_TOKENS` for an image, about one token per
 * 4 bytes of a text file (the documented approximation). One rule for the window check of the context
 * engine and the estimate of the prompt that carries it.
 *
 * @since 0.1.0
 * @category Counting
 */
export const attachmentTokens = (a: { readonly mediaType: string; readonly size: number }): number =>
  a.mediaType.startsWith("image/") ? IMAGE_TOKENS : Math.ceil(a.size / 4)

/** Tokens of one prompt message, framing included. @since 0.1.0 @category Counting */
export const messageTokens = (c: Counter, m: PromptMessage): number => {
  switch (m.role) {
    case "system":
      return TOKENS_PER_MESSAGE + c.count(m.text)
    case "user":
      return TOKENS_PER_MESSAGE + c.count(m.text) + (m.images?.length ?? 0) * IMAGE_TOKENS
    case "assistant": {
      let n = TOKENS_PER_MESSAGE + c.count(m.text)
      for (const call of m.toolCalls) n += TOKENS_PER_MESSAGE + c.count(call.name) + c.count(argsText(call.args))
      return n
    }
    case "tool":
      return TOKENS_PER_MESSAGE + c.count(m.name) + c.count(m.output)
  }
}

const toolCache = new WeakMap<Counter, WeakMap<ToolSpec, number>>()

/** Tokens of one tool as the model sees it (name, description, JSON Schema). @since 0.1.0 @category Counting */
export const toolTokens = (c: Counter, t: ToolSpec): number => {
  let cache = toolCache.get(c)
  if (cache === undefined) {
    cache = new WeakMap()
    toolCache.set(c, cache)
  }
  let n = cache.get(t)
  if (n === undefined) {
    n = TOKENS_PER_MESSAGE + c.count(t.name) + c.count(t.description) + c.count(argsText(t.parameters))
    cache.set(t, n)
  }
  return n
}

/**
 * Tokens of a whole request: instructions, every message, every tool, and the reply priming. Counts
 * from scratch; the context engine keeps per-message counts so it need not.
 *
 * @since 0.1.0
 * @category Counting
 */
export const requestTokens = (c: Counter, request: ModelRequest): number => {
  let n = TOKENS_PER_REPLY
  if (request.instructions !== undefined && request.instructions.length > 0) {
    n += TOKENS_PER_MESSAGE + c.count(request.instructions)
  }
  for (const m of request.messages) n += messageTokens(c, m)
  for (const t of request.tools) n += toolTokens(c, t)
  return n
}
