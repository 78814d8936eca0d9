/**
 * End-to-end: the real palyrad gives memory back once it goes quiet after a burst of requests (its
 * memory reducer, counted in `/metrics`), and everything it served is still answered afterwards
 * from the journal.
 */
import { afterAll, expect, it } from "vitest"
import { fresh, startDaemon, stopDaemons } from "./support.js"

afterAll(stopDaemons)

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

it("after a burst of session creations and a quiet window, palyrad runs one reduction and still answers", async () => {
  const daemon = await startDaemon(fresh("palyra-reducer-"), ["--port", "0"], { PALYRA_GRPC_PORT: "0" })
  const headers = { authorization: `Bearer ${daemon.token}`, "content-type": "application/json" }
  const reductions = async () => {
    const text = await fetch(`${daemon.url}/metrics`, { headers }).then((r) => r.text())
    const m = /^palyra_memory_reductions(?:_total)?(?:\{[^}]*\})?\s+(\d+)/m.exec(text)
    return m ? Number(m[1]) : 0
  }
  const ids: Array<string> = []
  for (let i = 0; i < 300; i += 25) {
    const created = await Promise.all(
      Array.from({ length: 25 }, (_, k) =>
        fetch(`${daemon.url}/v1/sessions`, {
          method: "POST",
          headers,
          body: JSON.stringify({ sessionKey: `burst-${i + k}`, title: "burst" })
        }).then((r) => r.json() as Promise<{ id: string }>)
      )
    )
    ids.push(...created.map((s) => s.id))
  }
  // The reducer samples every 2 s and needs one whole quiet window after the work.
  let count = 0
  for (let waited = 0; waited < 20_000 && count === 0; waited += 500) {
    await sleep(500)
    count = await reductions()
  }
  expect(count).toBeGreaterThanOrEqual(1)
  // Quiet since: no further reduction without new work.
  await sleep(4500)
  expect(await reductions()).toBe(count)
  // What the burst created is still there.
  const session = (id: string | undefined) =>
    fetch(`${daemon.url}/v1/sessions/${id}`, { headers }).then((r) => r.json() as Promise<{ id: string }>)
  const [first, last] = [await session(ids[0]), await session(ids.at(-1))]
  expect([first.id, last.id]).toEqual([ids[0], ids.at(-1)])
  expect(new Set(ids).size).toBe(300)
}, 90_000)
