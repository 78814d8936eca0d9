/**
 * Where the web console's built files are: `@palyra/console`'s `dist`, found through the package
 * (so an installed `palyrad` finds the copy installed next to it). `undefined` when the package is
 * not installed; the HTTP transport then answers `/` with how to build it.
 *
 * @internal
 */
import { createRequire } from "node:module"
import { dirname, join } from "node:path"

/** @internal */
export const consoleAssetsDir = (): string | undefined => {
  try {
    return join(dirname(createRequire(import.meta.url).resolve("@palyra/console/package.json")), "dist")
  } catch {
    return undefined
  }
}
