/**
 * A finalizer registered on the current scope itself (`Scope.addFinalizer`), not through
 * `Effect.addFinalizer`: the latter diffs the fiber's refs at registration and patches them back at
 * every close, which plain closes that read no fiber ref do not need (~10–60 KB allocated per daemon
 * turn on the followers' paths, PERF-NOTES round 16b).
 *
 * @internal
 */
import { Effect, Scope } from "effect"

/** Run `finalizer` when the current scope closes (registered on the scope itself). @internal */
export const onScopeClose = (finalizer: Effect.Effect<unknown>): Effect.Effect<void, never, Scope.Scope> =>
  Effect.flatMap(Effect.scope, (scope) => Scope.addFinalizer(scope, finalizer))
