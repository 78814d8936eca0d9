/**
 * `POST /v1/runs` as `multipart/form-data`: fields `text`, `sessionId`, `sessionKey`, `channel`,
 * `agent`; every file part is an attachment (its filename and content type kept; the type is only a
 * hint — images are recognised from their bytes in core). Parsed by `multipasta` (the parser behind
 * `@effect/platform`'s `Multipart`), after the body was read under the same size limit as JSON; a
 * malformed body is an `InvalidArgument`, never a partial message.
 */
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import { Errors } from "@palyra/core"
import { Effect, Schema } from "effect"
import * as Multipasta from "multipasta"
import { MessagePayload } from "../Api.js"
import { fromParseError, type Limits, readBytes, readJson } from "./body.js"

const FIELDS = new Set(["text", "sessionId", "sessionKey", "channel", "agent"])
const invalid = (message: string) => new Errors.InvalidArgument({ message })

interface Parsed {
  readonly fields: Record<string, string>
  readonly files: Array<{ name: string; mediaType: string; data: Uint8Array }>
}

const parse = (headers: Record<string, string>, body: Uint8Array, limits: Limits) =>
  Effect.async<Parsed, Errors.InvalidArgument | Errors.PayloadTooLarge>((resume) => {
    const fields: Record<string, string> = {}
    const files: Parsed["files"] = []
    let failed = false
    const fail = (e: Errors.InvalidArgument | Errors.PayloadTooLarge) => {
      if (!failed) resume(Effect.fail(e))
      failed = true
    }
    const parser = Multipasta.make({
      headers,
      maxParts: 40,
      maxTotalSize: limits.maxBytes,
      maxFieldSize: 200_000,
      onField: (info, value) => {
        if (!FIELDS.has(info.name)) return fail(invalid(`unknown form field ${JSON.stringify(info.name)}`))
        if (info.name in fields) return fail(invalid(`form field ${info.name} appears twice`))
        try {
          fields[info.name] = new TextDecoder("utf-8", { fatal: true }).decode(value)
        } catch {
          fail(invalid(`form field ${info.name} is not valid UTF-8`))
        }
      },
      onFile: (info) => {
        const chunks: Array<Uint8Array> = []
        return (chunk) => {
          if (chunk !== null) {
            chunks.push(chunk)
            return
          }
          files.push({
            name: info.filename ?? "",
            mediaType: info.contentType,
            data: Buffer.concat(chunks)
          })
        }
      },
      onError: (error) =>
        fail(
          error._tag === "ReachedLimit"
            ? new Errors.PayloadTooLarge({
                what: `multipart body (${error.limit})`,
                size: body.length,
                limit: limits.maxBytes
              })
            : invalid(`the multipart body is malformed (${error._tag})`)
        ),
      onDone: () => {
        if (!failed) resume(Effect.succeed({ fields, files }))
        failed = true
      }
    })
    parser.write(body)
    parser.end()
  })

const FormFields = MessagePayload.pipe(Schema.omit("attachments"))

/**
 * The message of a `POST /v1/runs`, from JSON or from a multipart form.
 *
 * @internal
 */
export const readMessage = (
  limits: Limits
): Effect.Effect<
  typeof MessagePayload.Type,
  Errors.InvalidArgument | Errors.PayloadTooLarge,
  HttpServerRequest.HttpServerRequest
> =>
  Effect.gen(function* () {
    const request = yield* HttpServerRequest.HttpServerRequest
    const type = request.headers["content-type"] ?? ""
    if (!/^multipart\/form-data\s*;/i.test(type)) return yield* readJson(MessagePayload, limits)
    const body = yield* readBytes(request, limits.maxBytes)
    const { fields, files } = yield* parse({ "content-type": type }, body, limits)
    const decoded = yield* Schema.decodeUnknown(FormFields, { errors: "all", onExcessProperty: "error" })(fields).pipe(
      Effect.mapError(fromParseError)
    )
    return {
      ...decoded,
      ...(files.length === 0
        ? {}
        : { attachments: files.map((f) => ({ name: f.name || undefined, mediaType: f.mediaType, data: f.data })) })
    }
  })
