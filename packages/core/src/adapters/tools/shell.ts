/**
 * `shell.exec`: argv form only (no shell, no string interpolation), cwd inside the workspace, a
 * scrubbed environment, a timeout and an output cap; it runs in its own process group, which is
 * killed on timeout and on cancellation, so no child outlives the call. The `sandbox` option picks
 * a tier (`none`, `limits`, `os`; see `Sandbox`); the tool declares it to policy and every result
 * says which tier it ran under (`sandbox` in the output).
 *
 * @since 0.1.0
 */
import { Effect, Schema } from "effect"
import * as Tool from "../../ports/Tool.js"
import { confine } from "./fs.js"
import * as Sandbox from "./sandbox/Sandbox.js"

/** @since 0.1.0 @category Models */
export interface ShellOptions {
  /** Commands run with their cwd inside this root. */
  readonly root: string
  /** Default and largest timeout, in ms (default 30 s). */
  readonly timeoutMs?: number | undefined
  /** Output cap for stdout and stderr together, in bytes (default 64 KiB). */
  readonly maxOutputBytes?: number | undefined
  /** Environment passed to commands (default: `Sandbox.defaultEnv` of the tier). */
  readonly env?: Readonly<Record<string, string>> | undefined
  /** The sandbox tier and its settings (default tier `none`). */
  readonly sandbox?: Sandbox.Options | undefined
}

/** `shell.exec`: argv only, confined cwd, scrubbed env, timeout, output cap, group kill, a sandbox tier. @since 0.1.0 @category Tools */
export const shellTool = (options: ShellOptions): Tool.AnyTool => {
  const maxTimeout = options.timeoutMs ?? 30_000
  const maxOutput = options.maxOutputBytes ?? 64 * 1024
  const tier = options.sandbox?.tier ?? "none"
  const env = options.env ?? Sandbox.defaultEnv(tier, options.root)
  return Tool.makeLazy("shell.exec", {
    description: "Run a program with arguments (argv form; no shell features such as pipes or globs) in the workspace.",
    parameters: Schema.Struct({
      argv: Schema.Array(Schema.String).pipe(Schema.minItems(1), Schema.maxItems(256)),
      cwd: Schema.optionalWith(Schema.String, { default: () => "." }),
      timeoutMs: Schema.optional(Schema.Int.pipe(Schema.between(1, 3_600_000)))
    }),
    risk: "sensitive",
    category: "shell",
    sandbox: tier,
    timeout: `${maxTimeout + 5_000} millis`,
    execute: ({ argv, cwd, timeoutMs }, context) =>
      Effect.gen(function* () {
        const dir = yield* confine("shell.exec", options.root, cwd)
        const r = yield* Sandbox.spawn(
          {
            tool: "shell.exec",
            argv,
            workspace: options.root,
            cwd: dir,
            env,
            timeoutMs: Math.min(timeoutMs ?? maxTimeout, maxTimeout),
            maxOutputBytes: maxOutput,
            owner: { sessionId: context.sessionId, runId: context.runId, toolCallId: context.toolCallId }
          },
          options.sandbox
        )
        return {
          exitCode: r.exitCode,
          signal: r.signal,
          stdout: r.stdout,
          stderr: r.stderr,
          truncated: r.truncated,
          sandbox: r.sandbox
        }
      })
  })
}
