#!/usr/bin/env node
/** palyra: the command-line client of a running palyrad. See `palyra --help`. */
import { main, processIo } from "../Cli.js"

const io = processIo()
const code = await main(process.argv.slice(2), process.env, io)
io.close()
process.exitCode = code
