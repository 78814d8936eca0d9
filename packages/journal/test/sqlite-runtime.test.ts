import { spawnSync } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, describe, expect, it } from "vitest"

const dir = mkdtempSync(join(tmpdir(), "palyra-sqlite-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

describe("better-sqlite3 under this Node", () => {
  it("opens, writes, closes and exits the process with code 0, twice on the same file", () => {
    const file = join(dir, "smoke.db")
    const script = fileURLToPath(new URL("./fixtures/open-write-close.mjs", import.meta.url))
    for (const expectedRows of [1, 2]) {
      const child = spawnSync(process.execPath, [script, file], { encoding: "utf8", timeout: 20_000 })
      expect(child.stderr).not.toMatch(/Assertion failed/)
      expect(child.signal).toBeNull()
      expect(child.status).toBe(0)
      expect(JSON.parse(child.stdout.trim())).toEqual({ mode: "wal", rows: expectedRows })
    }
  })
})
