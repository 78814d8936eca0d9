/**
 * A whole transport in one file: newline-delimited JSON over any pair of byte streams (stdio, a
 * socket, a pipe). It only translates lines to Gateway calls and TapeEvents back, like every
 * Palyra transport; all behaviour — including who may do what — stays in the Gateway.
 *
 * Requests (one JSON object a line):
 *   {"op":"send","text":"…","sessionKey":"…"}                 → starts a run, streams its events
 *   {"op":"approve","approvalId":"…","decision":"approve"}    → resolves an approval
 *   {"op":"cancel","runId":"…"}
 * Responses: {"event": TapeEvent} lines, {"error": {"code","message"}} lines.
 */

import { createInterface } from "node:readline"
import type { Readable, Writable } from "node:stream"
import { type Caller, Errors, Gateway, Ids } from "@palyra/core"
import { Cause, Effect, Option, Schema, type Scope, Stream } from "effect"

const Request = Schema.Union(
  Schema.Struct({ op: Schema.Literal("send"), text: Schema.String, sessionKey: Schema.optional(Schema.String) }),
  Schema.Struct({
    op: Schema.Literal("approve"),
    approvalId: Ids.ApprovalId,
    decision: Schema.Literal("approve", "deny")
  }),
  Schema.Struct({ op: Schema.Literal("cancel"), runId: Ids.RunId })
)
const decode = Schema.decodeUnknownEither(Schema.parseJson(Request))

/**
 * Serve one connection for an authenticated `caller` until `input` ends and every run it started
 * has finished. No access checks here: the Gateway makes them for every call.
 */
export const serveJsonl = (input: Readable, output: Writable, caller: Caller.Caller) =>
  Effect.gen(function* () {
    const gateway = yield* Gateway.Gateway
    const write = (value: unknown) => Effect.sync(() => void output.write(`${JSON.stringify(value)}\n`))
    const fail = (cause: Cause.Cause<unknown>) => {
      const e = Cause.failureOption(cause)
      const error = Option.isSome(e) && Errors.isPalyraError(e.value) ? e.value : undefined
      return write({ error: { code: error?.code ?? "internal", message: error?.message ?? "internal error" } })
    }
    const lines = Stream.fromAsyncIterable(createInterface({ input }), (e) => e)
    yield* lines.pipe(
      Stream.filter((line) => line.trim().length > 0),
      Stream.mapEffect(
        (line) => {
          const request = decode(line)
          if (request._tag === "Left") {
            return write({ error: { code: "invalid_argument", message: "not a valid request line" } })
          }
          const r = request.right
          const handled: Effect.Effect<unknown, unknown, Scope.Scope> =
            r.op === "send"
              ? Effect.flatMap(gateway.startRun(caller, { text: r.text, key: r.sessionKey }), (started) =>
                  // Stream this run's events in the background; the connection keeps reading.
                  Effect.forkScoped(Stream.runForEach(started.events, (event) => write({ event })))
                )
              : r.op === "approve"
                ? gateway.resolveApproval(caller, { approvalId: r.approvalId, decision: r.decision })
                : gateway.cancelRun(caller, r.runId)
          return handled.pipe(Effect.catchAllCause(fail))
        },
        { concurrency: 1 }
      ),
      Stream.runDrain
    )
  }).pipe(Effect.scoped)
