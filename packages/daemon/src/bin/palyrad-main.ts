/**
 * palyrad: the Palyra daemon. The only place that owns a process: it reads the configuration, runs
 * the assembly in `Main.ts`, and turns SIGINT/SIGTERM into a graceful shutdown (bounded: if the
 * shutdown takes longer than `shutdown_timeout_seconds`, the process exits with code 1).
 */
import { Cause, Effect, Either, Exit, Fiber } from "effect"
import * as Config from "../Config.js"
import { loggerLayer, run } from "../Main.js"

const fail = (message: string): never => {
  process.stderr.write(`palyrad: ${message}\n`)
  process.exit(2)
}

const flags = Config.parseFlags(process.argv.slice(2))
if (Either.isLeft(flags)) fail(flags.left.message)
const loaded = Effect.runSyncExit(Config.load(Either.getOrThrow(flags)))
if (Exit.isFailure(loaded))
  fail(
    Cause.squash(loaded.cause) instanceof Error
      ? (Cause.squash(loaded.cause) as Error).message
      : String(Cause.squash(loaded.cause))
  )
const config = Exit.isSuccess(loaded) ? loaded.value : (undefined as never)

const program = run(config, ({ url, grpcUrl, token, generated, tokenFile }) => {
  const lines = [
    `palyrad is listening on ${url}`,
    `  gRPC / gRPC-Web / Connect (HTTP/2): ${grpcUrl}`,
    `  model: ${config.models.join(" > ")}   workspace: ${config.workspaceDir}`,
    generated
      ? `  admin token (shown once; stored with mode 0600 in ${tokenFile}):\n    ${token}`
      : `  admin token: ${tokenFile ? `in ${tokenFile}` : "from the configuration"}`,
    `  chat:   npm run palyra -- chat    (from the repository; the CLI reads the token file in the data dir)`,
    `  health: curl ${url}/healthz`,
    ...(config.console.enabled ? [`  web console: ${url}/   (sign in with the admin token)`] : [])
  ]
  process.stderr.write(`${lines.join("\n")}\n`)
}).pipe(Effect.provide(loggerLayer(config)))

const fiber = Effect.runFork(program)
let stopping = false
const stop = (signal: string) => {
  if (stopping) return
  stopping = true
  process.stderr.write(`palyrad: ${signal} received, shutting down\n`)
  setTimeout(() => {
    process.stderr.write("palyrad: shutdown took too long; exiting\n")
    process.exit(1)
  }, config.shutdown_timeout_seconds * 1000).unref()
  Effect.runFork(Fiber.interrupt(fiber))
}
process.on("SIGINT", () => stop("SIGINT"))
process.on("SIGTERM", () => stop("SIGTERM"))

fiber.addObserver((exit) => {
  if (Exit.isSuccess(exit) || Cause.isInterruptedOnly(exit.cause)) {
    process.exitCode = 0
    return
  }
  const error = Cause.squash(exit.cause)
  process.stderr.write(`palyrad: ${error instanceof Error ? error.message : String(error)}\n`)
  process.exitCode = 1
})
