import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { journalContract } from "@palyra/core/journal-contract"
import { SqliteJournal } from "../src/index.js"

journalContract("sqlite (:memory:)", () => SqliteJournal.layer({ filename: ":memory:" }))

const dir = mkdtempSync(join(tmpdir(), "palyra-contract-"))
let n = 0
journalContract("sqlite (file, WAL)", () => SqliteJournal.layer({ filename: join(dir, `j${n++}.db`) }))
journalContract("sqlite (file, WAL, inline writer)", () =>
  SqliteJournal.layer({ filename: join(dir, `j${n++}.db`), writer: "inline" })
)
