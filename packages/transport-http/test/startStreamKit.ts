/**
 * What the streamed-start tests share: a real kernel (in-memory journal, the given scripted model)
 * whose `startRunFollowing` the test holds (`@palyra/core/testing`'s `holdStartRunFollowing`), served
 * on 127.0.0.1 for the file's tests, and an SSE reader that sees each id'd frame as it arrives.
 */
import type { Gateway, Journal, ScriptedModel } from "@palyra/core"
import { gatewayLayer, type HeldStart, holdStartRunFollowing } from "@palyra/core/testing"
import { Exit, Layer, ManagedRuntime, Scope } from "effect"
import { afterAll, beforeAll } from "vitest"
import { HttpTransport } from "../src/index.js"

/** An SSE event frame with an id. */
export interface Frame {
  readonly id: number
  readonly event: string
  readonly data: { readonly runId?: string; readonly sessionId?: string }
}

/** The kernel over `model` with its `startRunFollowing` held, and a runtime over both. */
export const heldRuntime = (model: ScriptedModel.ScriptedModel) => {
  const held: HeldStart = holdStartRunFollowing()
  const runtime = ManagedRuntime.make(
    Layer.provideMerge(held.layer, gatewayLayer({ model }) as Layer.Layer<Gateway.Gateway | Journal.Journal>)
  )
  return { held, runtime }
}

/** Serves `HttpTransport.serve(options)` in `runtime` from `beforeAll` to `afterAll`; `url` once served. */
export const servedFor = (
  runtime: ManagedRuntime.ManagedRuntime<Gateway.Gateway | Journal.Journal, never>,
  options: HttpTransport.ServeOptions
) => {
  const served = { url: "" }
  let scope: Scope.CloseableScope
  beforeAll(async () => {
    scope = await runtime.runPromise(Scope.make())
    served.url = (await runtime.runPromise(HttpTransport.serve(options).pipe(Scope.extend(scope)))).url
  })
  afterAll(async () => {
    await runtime.runPromise(Scope.close(scope, Exit.void))
    await runtime.dispose()
  })
  return served
}

/** Splits SSE text fed to it in chunks into blocks; each block with an `id:` is a `Frame` for `onFrame`. */
export const sseFrames = (onFrame: (f: Frame) => void) => {
  let rest = ""
  return (chunk: string) => {
    rest += chunk
    for (let at = rest.indexOf("\n\n"); at >= 0; at = rest.indexOf("\n\n")) {
      const block = rest.slice(0, at)
      rest = rest.slice(at + 2)
      const field = (name: string) =>
        block
          .split("\n")
          .find((l) => l.startsWith(`${name}:`))
          ?.slice(name.length + 1)
          .trim()
      const id = field("id")
      if (id === undefined) continue
      onFrame({ id: Number(id), event: field("event") ?? "", data: JSON.parse(field("data") ?? "{}") })
    }
  }
}
