/**
 * What the stream benches share: a SQLite journal file whose appends are stamped when they return
 * (both forms of the append, so the tape keeps the daemon's path), and the gateway served over gRPC
 * and HTTP on 127.0.0.1 in one scope.
 */
import { type Errors, type Gateway, Journal, type TapeEvent } from "@palyra/core"
import { SqliteJournal } from "@palyra/journal"
import { GrpcTransport } from "@palyra/transport-grpc"
import { HttpTransport } from "@palyra/transport-http"
import { Effect, Exit, Layer, type ManagedRuntime, Scope } from "effect"

/**
 * The SQLite journal at `filename`, `stamp` called with what each append stored once it returned.
 * `plainForm: false` leaves the journal's plain append out, so the tape takes its Effect form (A/B).
 */
export const stampedJournal = (
  filename: string,
  stamp: (stored: ReadonlyArray<TapeEvent.TapeEvent>) => void,
  options: { readonly plainForm?: boolean } = {}
): Layer.Layer<Journal.Journal, Errors.JournalError> =>
  Layer.effect(
    Journal.Journal,
    Effect.map(Journal.Journal, (inner) => {
      const append: Journal.Service["append"] = (sessionId, events, effects) =>
        Effect.tap(inner.append(sessionId, events, effects), (stored) => Effect.sync(() => stamp(stored)))
      const innerNow = Journal.appendNowOf(inner)
      return {
        ...inner,
        append:
          innerNow === undefined || options.plainForm === false
            ? append
            : Journal.withAppendNow(append, (sessionId, events, effects, done) =>
                innerNow(sessionId, events, effects, (exit) => {
                  if (Exit.isSuccess(exit)) stamp(exit.value)
                  done(exit)
                })
              )
      }
    })
  ).pipe(Layer.provide(SqliteJournal.layer({ filename })))

/** gRPC and HTTP served in `runtime` on 127.0.0.1 (ports chosen by the system) until `close`. */
export const serveBoth = async (
  runtime: ManagedRuntime.ManagedRuntime<Gateway.Gateway | Journal.Journal, never>,
  tokens: ReadonlyArray<{ readonly token: string; readonly principal: string }>
) => {
  const scope = await runtime.runPromise(Scope.make())
  const grpc = await runtime.runPromise(GrpcTransport.serve({ port: 0, tokens }).pipe(Scope.extend(scope)))
  const http = await runtime.runPromise(HttpTransport.serve({ port: 0, tokens }).pipe(Scope.extend(scope)))
  /** Closes the servers, then disposes the runtime. */
  const close = async () => {
    await runtime.runPromise(Scope.close(scope, Exit.void))
    await runtime.dispose()
  }
  return { grpc, http, close }
}
