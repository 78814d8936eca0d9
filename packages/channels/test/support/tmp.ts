import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Effect } from "effect"

/** A fresh temporary directory, removed when the scope closes. */
export const tempDir = Effect.acquireRelease(
  Effect.sync(() => mkdtempSync(join(tmpdir(), "palyra-channels-"))),
  (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
)
