/**
 * `palyra chat --attach FILE` (repeatable): the files read from disk and sent with the message as
 * the contract's JSON attachments (`{ name, mediaType?, data }`, the bytes in base64). palyrad
 * decides what it accepts (images for models that take them, UTF-8 text, its size limits) and
 * its refusal is printed as it gave it.
 *
 * @since 0.1.0
 */
import { readFile, stat } from "node:fs/promises"
import { basename, extname, resolve } from "node:path"
import * as Options from "@effect/cli/Options"
import type { Api } from "@palyra/transport-http"
import { Effect } from "effect"
import { CliEnv, Failed } from "../internal/cli/io.js"

/** The `--attach FILE` option, repeatable. @since 0.1.0 @category Options */
export const attachOption = Options.text("attach").pipe(
  Options.withPseudoName("FILE"),
  Options.withAlias("a"),
  Options.withDescription("send this file with the message (an image or a UTF-8 text file); repeatable"),
  Options.repeated
)

/** Text subtypes worth naming (images are recognised by palyrad from their bytes). */
const textTypes: Readonly<Record<string, string>> = {
  ".md": "text/markdown",
  ".csv": "text/csv",
  ".json": "application/json",
  ".html": "text/html",
  ".xml": "application/xml",
  ".yaml": "application/yaml",
  ".yml": "application/yaml"
}

/** The one attachment the contract expects for a file. @since 0.1.0 @category Models */
export type AttachmentPayload = NonNullable<typeof Api.MessagePayload.Type.attachments>[number]

/**
 * Read each file (relative to the working directory) as an attachment; a missing file, a
 * directory or an unreadable file fails with its path before anything is sent.
 *
 * @since 0.1.0
 * @category Attachments
 */
export const readAttachments = (
  files: ReadonlyArray<string>
): Effect.Effect<ReadonlyArray<AttachmentPayload>, Failed, CliEnv> =>
  Effect.gen(function* () {
    const { cwd } = yield* CliEnv
    const read: Array<AttachmentPayload> = []
    for (const file of files) {
      const path = resolve(cwd, file)
      const data = yield* Effect.tryPromise({
        try: async () => {
          const info = await stat(path)
          if (!info.isFile()) throw Object.assign(new Error("not a regular file"), { code: "EISDIR" })
          return new Uint8Array(await readFile(path))
        },
        catch: (cause) => {
          const code = (cause as { readonly code?: unknown }).code
          const why =
            code === "ENOENT"
              ? "no such file"
              : code === "EISDIR"
                ? "not a regular file"
                : code === "EACCES"
                  ? "permission denied"
                  : String(cause)
          return new Failed({ message: `cannot attach ${file}: ${why}` })
        }
      })
      const mediaType = textTypes[extname(path).toLowerCase()]
      read.push({ name: basename(path), data, ...(mediaType === undefined ? {} : { mediaType }) })
    }
    return read
  }).pipe(Effect.withSpan("cli.chat.readAttachments", { attributes: { files: files.length } }))
