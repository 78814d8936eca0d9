/**
 * Reading a JSON request body that an attacker wrote. In order, each step answering with a typed
 * error and nothing stored: a size limit while reading (a declared oversize body is refused before
 * reading, in `guard.ts`); strict UTF-8 (`TextDecoder` with `fatal: true`, so `ff fe`, `c3 28`
 * and encoded surrogates are refused rather than turned into U+FFFD); a nesting-depth pre-scan of
 * the raw text (iterative, so no input can exhaust the stack of `JSON.parse` or of anything that
 * walks the value later); `JSON.parse`; no lone surrogates from `\u` escapes; then the Schema.
 */
import { IncomingMessage } from "node:http"
import * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
import { Errors } from "@palyra/core"
import { Effect, ParseResult, Schema, Stream } from "effect"

/** @internal */
export interface Limits {
  readonly maxBytes: number
  readonly maxDepth: number
}

/** Nesting deeper than this is refused (our payloads nest two or three levels; OpenAI's a few more). */
export const DEFAULT_MAX_DEPTH = 64

const invalid = (message: string, field?: string) =>
  new Errors.InvalidArgument(field === undefined ? { message } : { message, field })

const tooLarge = (size: number, limit: number) =>
  // The rest of the body is never read, so this connection cannot carry another request.
  Effect.zipRight(
    HttpApp.appendPreResponseHandler((_, response) =>
      Effect.succeed(HttpServerResponse.setHeader(response, "connection", "close"))
    ),
    Effect.fail(new Errors.PayloadTooLarge({ what: "request body", size, limit }))
  )

/**
 * Read a Node request body, refusing it once it passes `maxBytes`. Stopping early leaves the
 * socket open, so the 413 still reaches the client (the connection closes after it).
 */
const readIncoming = (message: IncomingMessage, maxBytes: number) =>
  Effect.catchTag(readNodeBody(message, maxBytes), "PayloadTooLarge", (e) => tooLarge(e.size, maxBytes))

/**
 * `readIncoming` without the platform's request context: a `PayloadTooLarge` is returned as is
 * (the caller closes the connection after its 413). For handlers served straight from Node.
 *
 * @internal
 */
export const readNodeBody = (message: IncomingMessage, maxBytes: number) =>
  Effect.async<Buffer, Errors.PayloadTooLarge | Errors.InvalidArgument>((resume) => {
    if (message.readableEnded || message.destroyed) {
      resume(Effect.fail(invalid("the request body could not be read")))
      return
    }
    const chunks: Array<Buffer> = []
    let size = 0
    const cleanup = () => {
      message.off("data", onData)
      message.off("end", onEnd)
      message.off("error", onError)
      message.off("close", onError)
    }
    const onData = (chunk: Buffer) => {
      size += chunk.byteLength
      if (size > maxBytes) {
        cleanup()
        message.pause()
        resume(Effect.fail(new Errors.PayloadTooLarge({ what: "request body", size, limit: maxBytes })))
      } else chunks.push(chunk)
    }
    const onEnd = () => {
      cleanup()
      resume(Effect.succeed(Buffer.concat(chunks, size)))
    }
    const onError = () => {
      cleanup()
      resume(Effect.fail(invalid("the request body could not be read")))
    }
    message.on("data", onData)
    message.on("end", onEnd)
    message.on("error", onError)
    // Closed before its end: the client went away mid-body.
    message.on("close", onError)
    return Effect.sync(cleanup)
  })

/** Read the raw body, refusing it once it passes `maxBytes`. @internal */
export const readBytes = (request: HttpServerRequest.HttpServerRequest, maxBytes: number) => {
  const source = NodeHttpServerRequest.toIncomingMessage(request)
  if (source instanceof IncomingMessage) return readIncoming(source, maxBytes)
  // Another server (e.g. a web handler): read its stream.
  return Effect.suspend(() => {
    const chunks: Array<Uint8Array> = []
    let size = 0
    return Stream.runForEach(request.stream, (chunk) => {
      size += chunk.byteLength
      if (size > maxBytes) return tooLarge(size, maxBytes)
      chunks.push(chunk)
      return Effect.void
    }).pipe(
      Effect.catchTag("RequestError", () => Effect.fail(invalid("the request body could not be read"))),
      Effect.map(() => Buffer.concat(chunks, size))
    )
  })
}

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false })

/**
 * The deepest nesting of `[` / `{` outside strings, stopping as soon as it passes `limit`.
 * Iterative: cost is one pass over the text whatever it holds.
 */
export const exceedsDepth = (text: string, limit: number): boolean => {
  let depth = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 0x5c)
        i++ // backslash: skip the escaped character
      else if (c === 0x22) inString = false
    } else if (c === 0x22) inString = true
    else if (c === 0x7b || c === 0x5b) {
      if (++depth > limit) return true
    } else if (c === 0x7d || c === 0x5d) depth--
  }
  return false
}

const LONE_SURROGATE = /\p{Cs}/u

/** Parse JSON text with the depth limit; strings (keys and values) must be well-formed Unicode. */
export const parseJson = (text: string, maxDepth: number): Effect.Effect<unknown, Errors.InvalidArgument> =>
  Effect.suspend(() => {
    if (exceedsDepth(text, maxDepth)) {
      return Effect.fail(invalid(`the request body nests deeper than ${maxDepth} levels`))
    }
    let malformed = false
    let value: unknown
    try {
      value = JSON.parse(text, (key, v: unknown) => {
        if (LONE_SURROGATE.test(key) || (typeof v === "string" && LONE_SURROGATE.test(v))) malformed = true
        return v
      })
    } catch {
      return Effect.fail(invalid("the request body must be JSON"))
    }
    return malformed
      ? Effect.fail(invalid("the request body has a string that is not valid Unicode"))
      : Effect.succeed(value)
  })

/** A Schema failure as one `InvalidArgument` naming the first offending field. */
export const fromParseError = (error: ParseResult.ParseError): Errors.InvalidArgument => {
  const issues = ParseResult.ArrayFormatter.formatErrorSync(error)
  const first = issues[0]
  if (first === undefined) return invalid("the request is malformed")
  const path = first.path.map(String).join(".")
  const more = issues.length > 1 ? ` (and ${issues.length - 1} more)` : ""
  return invalid(path === "" ? `${first.message}${more}` : `${path}: ${first.message}${more}`, path || undefined)
}

const isJson = (contentType: string | undefined) =>
  contentType === undefined || /^application\/(?:[\w.+-]+\+)?json(?:\s*;.*)?$/i.test(contentType.trim())

/**
 * Read, check and decode the current request's JSON body with `schema`. An empty body is `{}`.
 * `strict` refuses properties the schema does not name.
 *
 * @internal
 */
export const readJson = <A, I>(
  schema: Schema.Schema<A, I>,
  limits: Limits,
  options: { readonly strict?: boolean | undefined } = {}
): Effect.Effect<A, Errors.InvalidArgument | Errors.PayloadTooLarge, HttpServerRequest.HttpServerRequest> =>
  Effect.gen(function* () {
    const request = yield* HttpServerRequest.HttpServerRequest
    if (!isJson(request.headers["content-type"])) {
      return yield* invalid("the request body must be JSON (content-type: application/json)")
    }
    const bytes = yield* readBytes(request, limits.maxBytes)
    return yield* decodeJsonBytes(schema, bytes, limits, options)
  })

/**
 * The checks of `readJson` after reading: strict UTF-8, an empty body as `{}`, the depth limit,
 * `JSON.parse`, no lone surrogates, then the Schema.
 *
 * @internal
 */
export const decodeJsonBytes = <A, I>(
  schema: Schema.Schema<A, I>,
  bytes: Uint8Array,
  limits: Limits,
  options: { readonly strict?: boolean | undefined } = {}
): Effect.Effect<A, Errors.InvalidArgument> =>
  Effect.suspend(() => {
    let text: string
    try {
      text = utf8.decode(bytes)
    } catch {
      return Effect.fail(invalid("the request body is not valid UTF-8"))
    }
    const value = text.trim() === "" ? Effect.succeed({}) : parseJson(text, limits.maxDepth)
    return Effect.flatMap(value, (v) =>
      Schema.decodeUnknown(schema, {
        errors: "all",
        onExcessProperty: options.strict === false ? "ignore" : "error"
      })(v).pipe(Effect.mapError(fromParseError))
    )
  })

/** Whether a content type is JSON (or absent, which reads as JSON). @internal */
export const isJsonType = (contentType: string | undefined): boolean => isJson(contentType)
