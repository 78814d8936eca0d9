/**
 * Message attachments on the HTTP wire: in a JSON `MessageRequest` as `attachments: [{ name?,
 * mediaType?, data }]` with `data` in base64, or as `multipart/form-data` (see `internal/multipart.ts`).
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/** One attachment in a JSON message: its bytes in base64 (RFC 4648). @since 0.1.0 @category Payloads */
export const AttachmentPayload = Schema.Struct({
  name: Schema.optional(Schema.String.pipe(Schema.maxLength(255))),
  /** Only names a text file's subtype: images are recognised from their bytes. */
  mediaType: Schema.optional(Schema.String.pipe(Schema.maxLength(255))),
  data: Schema.Uint8ArrayFromBase64
}).annotations({ identifier: "AttachmentRequest" })

/** @since 0.1.0 @category Payloads */
export const Attachments = Schema.optional(Schema.Array(AttachmentPayload).pipe(Schema.maxItems(32)))

/**
 * The OpenAPI operation of `POST /v1/runs` with its `multipart/form-data` body documented beside the
 * JSON one (the handler reads both; see `internal/multipart.ts`).
 *
 * @since 0.1.0
 * @category OpenAPI
 */
export const withMultipartForm = (operation: Record<string, unknown>): Record<string, unknown> => {
  const body = (operation.requestBody ?? { required: true, content: {} }) as {
    readonly content?: Record<string, unknown>
  }
  const text = { type: "string" }
  return {
    ...operation,
    requestBody: {
      ...body,
      content: {
        ...body.content,
        "multipart/form-data": {
          schema: {
            type: "object",
            required: ["text"],
            properties: {
              text: { ...text, minLength: 1 },
              sessionId: text,
              sessionKey: text,
              channel: text,
              agent: text,
              file: {
                type: "array",
                description:
                  "Any number of file parts (any field name): images (PNG, JPEG, GIF, WebP) or UTF-8 text files",
                items: { type: "string", contentMediaType: "application/octet-stream" }
              }
            }
          }
        }
      }
    }
  }
}
