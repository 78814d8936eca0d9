/**
 * bench/loop/steps.ts: only Palyra's side of the 10-step tool loop (for profiling the loop's
 * per-step cost alone): `node --cpu-prof --conditions=@palyra/source --import tsx bench/loop/steps.ts [runs]`.
 */
import { oursOnce as once, runtime, STEPS } from "./ours.js"

const runs = Number(process.argv[2] ?? 2000)
const main = async () => {
  for (let i = 0; i < 100; i++) await runtime.runPromise(once)
  const c0 = process.cpuUsage()
  for (let i = 0; i < runs; i++) await runtime.runPromise(once)
  const c = process.cpuUsage(c0)
  console.log(`CPU µs/step: ${((c.user + c.system) / (runs * STEPS)).toFixed(1)}`)
  await runtime.dispose()
}
void main()
