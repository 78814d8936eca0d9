import { Journal } from "../src/index.js"
import { journalContract } from "../src/JournalContract.js"

journalContract("memory", () => Journal.layerMemory())
