/**
 * A progress bar on stderr (stdout stays clean for `--json`): redrawn in place on a terminal, one
 * line per update otherwise (logs and tests see every page).
 */
import { Effect } from "effect"
import type { Io } from "./io.js"

const WIDTH = 28

/** The bar for `done` of `total`. @internal */
export const render = (label: string, done: number, total: number): string => {
  const ratio = total <= 0 ? 1 : Math.min(1, done / total)
  const filled = Math.round(ratio * WIDTH)
  return `${label} [${"#".repeat(filled)}${"-".repeat(WIDTH - filled)}] ${Math.floor(ratio * 100)
    .toString()
    .padStart(3)}% ${done.toLocaleString("en-US")}/${total.toLocaleString("en-US")}`
}

/** A reporter for one task: `update` per step, `done` at the end (ends the line on a terminal). @internal */
export const make = (io: Io, label: string) => {
  let drawn = false
  return {
    update: (done: number, total: number) =>
      Effect.sync(() => {
        if (io.interactive) {
          io.err(`\r${render(label, done, total)}`)
          drawn = true
        } else io.err(`${render(label, done, total)}\n`)
      }),
    done: Effect.sync(() => {
      if (drawn) io.err("\n")
      drawn = false
    })
  }
}
