/**
 * The CLI's side of the terminal: where text goes, how a line is read when stdin is not a terminal,
 * the environment it reads its fallbacks from, and the failures that become exit codes.
 *
 * On a terminal, questions are `@effect/cli` prompts (they draw what is typed); otherwise a line is
 * read from stdin, so scripts can pipe answers in.
 */
import { createInterface, type Interface } from "node:readline"
import * as Prompt from "@effect/cli/Prompt"
import type * as Terminal from "@effect/platform/Terminal"
import { Context, Data, Effect } from "effect"

/** Output, input and whether stdin is a terminal. @internal */
export interface Io {
  readonly out: (text: string) => void
  readonly err: (text: string) => void
  /** Ask a question and read one line (used when stdin is not a terminal); "" at end of input. */
  readonly ask: (question: string) => Promise<string>
  readonly interactive: boolean
}

/** @internal */
export class CliIo extends Context.Tag("@palyra/daemon/CliIo")<CliIo, Io>() {}

/** The environment and working directory the CLI resolves its fallbacks against. @internal */
export class CliEnv extends Context.Tag("@palyra/daemon/CliEnv")<
  CliEnv,
  { readonly env: Record<string, string | undefined>; readonly cwd: string }
>() {}

/** Print to stdout. @internal */
export const out = (text: string) => Effect.flatMap(CliIo, (io) => Effect.sync(() => io.out(text)))
/** Print to stderr. @internal */
export const err = (text: string) => Effect.flatMap(CliIo, (io) => Effect.sync(() => io.err(text)))
/** One JSON document on stdout. @internal */
export const json = (value: unknown) => out(`${JSON.stringify(value, null, 2)}\n`)

/**
 * Ask for a line: an `@effect/cli` text prompt on a terminal (it shows what is typed), else the
 * question on stdout and one line from stdin. Ctrl-C / Ctrl-D (or the end of input) give "".
 * @internal
 */
export const askLine = (question: string): Effect.Effect<string, never, CliIo | Terminal.Terminal> =>
  Effect.flatMap(CliIo, (io) =>
    io.interactive
      ? Prompt.text({ message: question }).pipe(Effect.orElseSucceed(() => ""))
      : Effect.promise(() => io.ask(`${question} `))
  )

// =============================================================================
// Failures and exit codes
// =============================================================================

/** Bad usage (exit 2). @internal */
export class Usage extends Data.TaggedError("Usage")<{ readonly message: string }> {}
/** palyrad is not reachable (exit 3). @internal */
export class Unreachable extends Data.TaggedError("Unreachable")<{ readonly message: string }> {}
/** No token, or the daemon refused it (exit 4). @internal */
export class TokenRefused extends Data.TaggedError("TokenRefused")<{ readonly message: string }> {}
/** A request or a check failed (exit 1); an empty message means the reason is already printed. @internal */
export class Failed extends Data.TaggedError("Failed")<{ readonly message: string }> {}

/** @internal */
export type CliFailure = Usage | Unreachable | TokenRefused | Failed

/** @internal */
export const exitCode = (failure: CliFailure): number => {
  switch (failure._tag) {
    case "Usage":
      return 2
    case "Unreachable":
      return 3
    case "TokenRefused":
      return 4
    case "Failed":
      return 1
  }
}

/** Terminal I/O for the real binary: stdin lines are read through one readline interface. @internal */
export const processIo = (): Io & { readonly close: () => void } => {
  let rl: Interface | undefined
  const lines: Array<string> = []
  const waiting: Array<(line: string) => void> = []
  let closed = false
  const ensure = () => {
    if (rl) return
    rl = createInterface({ input: process.stdin, terminal: false })
    rl.on("line", (line) => {
      const next = waiting.shift()
      if (next) next(line)
      else lines.push(line)
    })
    rl.on("close", () => {
      closed = true
      for (const next of waiting.splice(0)) next("")
    })
  }
  return {
    out: (text) => void process.stdout.write(text),
    err: (text) => void process.stderr.write(text),
    interactive: Boolean(process.stdin.isTTY && process.stdout.isTTY),
    ask: (question) => {
      ensure()
      process.stdout.write(question)
      const next = lines.shift()
      if (next !== undefined) return Promise.resolve(next)
      if (closed) return Promise.resolve("")
      return new Promise((resolve) => waiting.push(resolve))
    },
    close: () => rl?.close()
  }
}
