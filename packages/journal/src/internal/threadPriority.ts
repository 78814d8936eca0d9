import { getPriority, setPriority } from "node:os"

/**
 * How much lower than its process the journal's writer thread runs by default (nice units, Linux):
 * 0, its process's own priority. `PALYRA_JOURNAL_WRITER_NICE=<n>` lowers it by `n`.
 *
 * The measurement behind the switch (PERF-NOTES round 16, slice W): on a machine whose cores are
 * busy, each batch the main thread posts wakes the writer, and the scheduler's wake-up preemption
 * hands it the main thread's core at once — the main thread sits descheduled inside `postMessage`
 * for the whole commit (p50 50–200 µs a post at load 4–6; 2.9 of the main thread's preemptions per
 * turn were by the writer). Five levels down, the writer no longer preempts on wake-up (p50 9–12 µs a
 * post) and still gets its share of a contended core (nice 5 ≈ a third of a nice-0 thread's weight).
 * The turn's CPU and throughput did not move clearly at load 9–10 (7 pairs), so it is off by default
 * until a quieter machine decides.
 * @internal
 */
export const WRITER_NICE_OFFSET = 0

/**
 * Lowers the calling thread's scheduling priority by `offset` nice levels (capped at 19). Linux
 * only: there `setpriority(PRIO_PROCESS, 0)` — what `os.setPriority(0, …)` calls — applies to the
 * calling thread alone; elsewhere it would lower the whole process, so it does nothing. Lowering is
 * never a privileged operation; any failure leaves the thread as it was. Returns the nice value set.
 * @internal
 */
export const lowerThisThread = (offset: number, platform: NodeJS.Platform = process.platform): number | undefined => {
  if (platform !== "linux" || !(offset > 0)) return undefined
  try {
    const nice = Math.min(19, getPriority(0) + Math.floor(offset))
    setPriority(0, nice)
    return nice
  } catch {
    return undefined
  }
}

/** The writer's offset: `PALYRA_JOURNAL_WRITER_NICE` when it is a number, else the default. @internal */
export const writerNiceOffset = (env: string | undefined = process.env.PALYRA_JOURNAL_WRITER_NICE): number => {
  const n = env === undefined || env.trim() === "" ? Number.NaN : Number(env)
  return Number.isFinite(n) ? n : WRITER_NICE_OFFSET
}
