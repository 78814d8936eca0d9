/**
 * What palyrad's bundle gives `@effect/platform-node` for `import Mime from "mime"` (tsup's
 * `lazyShims` plugin): platform-node's HTTP platform imports `mime` at top level but calls it only
 * to name the type of a file response (`HttpServerResponse.file`), so `mime` (its type tables, ~40
 * KB of source) is loaded on that first call instead of at every start. The `require` is the
 * bundle's own (esbuild inlines `mime` and runs its body here, once).
 *
 * @since 0.1.0
 */

interface MimeModule {
  readonly getType: (path: string) => string | null
  readonly getExtension: (type: string) => string | null
}

let loaded: MimeModule | undefined

/** `mime`, loaded on the first call. */
const load = (): MimeModule => {
  loaded ??= require("mime") as MimeModule
  return loaded
}

/** `mime`'s API, each call loading it first. @since 0.1.0 @category Internal */
const Mime: MimeModule = {
  getType: (path) => load().getType(path),
  getExtension: (type) => load().getExtension(type)
}

export default Mime
