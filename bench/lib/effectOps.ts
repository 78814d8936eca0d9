/**
 * bench/lib/effectOps.ts: count what the `effect` a package loads runs — fiber run-loop steps (by
 * opcode) and fibers begun — by wrapping the FiberRuntime methods that execute each opcode. Counts,
 * unlike times, do not move with the machine's load. `by`: also count the operations by what they
 * run (the opcode and the start of its function's source), to name the Effect steps a turn takes.
 *
 * `req` resolves `effect` the way the measured package does (its own `createRequire`), so the
 * instrumented runtime is the one the package runs on.
 */
import type { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { pathToFileURL } from "node:url"

export interface EffectOps {
  /** Effect operations counted so far. */
  ops: number
  /** Fibers begun (started, forked or resumed) so far. */
  fibers: number
  /** Operations by what they run (only when asked for). */
  readonly by: Map<string, number> | undefined
  /** Count from now on, from zero. */
  readonly start: () => void
  readonly stop: () => void
}

const sourceOf = (f: unknown) => (typeof f === "function" ? f.toString().replace(/\s+/g, " ").slice(0, 110) : typeof f)

export const instrumentEffect = async (req: ReturnType<typeof createRequire>, by: boolean): Promise<EffectOps> => {
  const effectRoot = dirname(req.resolve("effect/package.json"))
  const fr = await import(pathToFileURL(join(effectRoot, "dist/esm/internal/fiberRuntime.js")).href)
  const proto = fr.FiberRuntime.prototype as Record<string, unknown>
  let counting = false
  const counts: EffectOps = {
    ops: 0,
    fibers: 0,
    by: by ? new Map<string, number>() : undefined,
    start: () => {
      counts.ops = 0
      counts.fibers = 0
      counts.by?.clear()
      counting = true
    },
    stop: () => {
      counting = false
    }
  }
  for (const op of Object.getOwnPropertyNames(proto)) {
    if (!/^[A-Z]/.test(op) || typeof proto[op] !== "function") continue
    const original = proto[op] as (...a: Array<unknown>) => unknown
    proto[op] = function (this: unknown, ...args: Array<unknown>) {
      if (counting) {
        counts.ops++
        if (counts.by !== undefined) {
          const e = args[0] as { effect_instruction_i0?: unknown; effect_instruction_i1?: unknown } | undefined
          const f = typeof e?.effect_instruction_i1 === "function" ? e.effect_instruction_i1 : e?.effect_instruction_i0
          const k =
            op === "Commit" && f === undefined
              ? `Commit ${sourceOf((e as { commit?: unknown }).commit)}`
              : op === "Success" && typeof f === "object" && f !== null
                ? `Success {${Object.keys(f).slice(0, 6).join(",")}}`
                : `${op} ${sourceOf(f)}`
          counts.by.set(k, (counts.by.get(k) ?? 0) + 1)
        }
      }
      return original.apply(this, args)
    }
  }
  for (const begin of ["start", "startFork", "resume"]) {
    const original = proto[begin] as (...a: Array<unknown>) => unknown
    proto[begin] = function (this: unknown, ...args: Array<unknown>) {
      if (counting) counts.fibers++
      return original.apply(this, args)
    }
  }
  return counts
}

/** A model stream that replays `parts` (the AI SDK's `doStream` result shape). */
export const replay = (parts: ReadonlyArray<unknown>) => ({
  stream: new ReadableStream({
    start(c) {
      for (const p of parts) c.enqueue(p as never)
      c.close()
    }
  })
})
