import { MemoryJournal } from "../src/index.js"
import { journalContract } from "../src/journal-contract.js"

journalContract("memory", () => MemoryJournal.layer())
