/**
 * `palyra sessions compact | checkpoints | restore` against a real HTTP server whose kernel has the
 * real context engine (`@palyra/core/context`) as its prompt assembler: preview changes nothing,
 * compact makes a checkpoint, restore puts it back — each also as `--json`. The CLI runs in-process
 * (`Cli.main`) with its connection from the environment (`PALYRA_URL`, `PALYRA_TOKEN`).
 */
import { ScriptedModel } from "@palyra/core"
import { CedarPolicy } from "@palyra/core/cedar"
import { ContextEngine } from "@palyra/core/context"
import { gatewayLayer } from "@palyra/core/testing"
import { Api, HttpTransport } from "@palyra/transport-http"
import { ManagedRuntime, Schema, Scope } from "effect"
import { afterAll, beforeAll, expect, it } from "vitest"
import { Cli } from "../src/index.js"

const model = ScriptedModel.make((request) =>
  request.instructions?.includes("summar") ? { text: "Goal: chat. Facts: turn numbers." } : { text: "noted" }
)
const runtime = ManagedRuntime.make(
  gatewayLayer({
    model,
    tools: [],
    policy: CedarPolicy.layer(),
    promptAssembler: ContextEngine.layer({ keepTurns: 2, autoCompact: false })
  })
)
let url = ""

beforeAll(async () => {
  const scope = await runtime.runPromise(Scope.make())
  const served = await runtime.runPromise(
    HttpTransport.serve({ port: 0, tokens: [{ token: "alice-token-0123456789", principal: "alice" }] }).pipe(
      Scope.extend(scope)
    )
  )
  url = served.url
})
afterAll(() => runtime.dispose())

const cli = async (...args: ReadonlyArray<string>) => {
  const seen = { out: "", err: "" }
  const code = await Cli.main(
    args,
    { PALYRA_URL: url, PALYRA_TOKEN: "alice-token-0123456789" },
    {
      out: (text) => {
        seen.out += text
      },
      err: (text) => {
        seen.err += text
      },
      ask: async () => "",
      interactive: false
    }
  )
  return { code, ...seen }
}

it("preview, compact, checkpoints, restore from the command line", async () => {
  const words = "a long paragraph of ordinary words about the weather and the sea ".repeat(8)
  for (let i = 1; i <= 6; i++) {
    const chat = await cli("chat", `message number ${i}: ${words}`, "--session-key", "long")
    expect(chat.code).toBe(0)
  }
  const sessions = Schema.decodeUnknownSync(Schema.Array(Api.Session))(
    JSON.parse((await cli("sessions", "list", "--json")).out)
  )
  const id = sessions[0]!.id

  const preview = await cli("sessions", "compact", id, "--preview")
  expect(preview.code).toBe(0)
  expect(preview.out).toMatch(/^preview: tape_seq \d+\.\.\d+ would become this .* summary .*; nothing changed/)
  expect(JSON.parse((await cli("sessions", "checkpoints", id, "--json")).out)).toEqual([])

  const compacted = Schema.decodeUnknownSync(Api.Compaction)(
    JSON.parse((await cli("sessions", "compact", id, "--json")).out)
  )
  expect(compacted).toMatchObject({ applied: true, sessionId: id })
  expect(compacted.tokensAfter).toBeLessThan(compacted.tokensBefore)

  const listed = await cli("sessions", "checkpoints", id)
  expect(listed.out).toContain(`${compacted.checkpointId}  `)
  const checkpoints = Schema.decodeUnknownSync(Schema.Array(Api.CheckpointInfo))(
    JSON.parse((await cli("sessions", "checkpoints", id, "--json")).out)
  )
  expect(checkpoints.map((c) => c.id)).toEqual([compacted.checkpointId])

  const restored = Schema.decodeUnknownSync(Api.Restored)(
    JSON.parse((await cli("sessions", "restore", id, compacted.checkpointId!, "--json")).out)
  )
  expect(restored.event).toMatchObject({ _tag: "CheckpointRestored", checkpointId: compacted.checkpointId })

  // A checkpoint id that is not a ULID is a usage error; an unknown one is the API's answer.
  expect((await cli("sessions", "restore", id, "not-a-checkpoint")).code).toBe(2)
  const unknown = await cli("sessions", "restore", id, "01KA0000000000000000000000")
  expect(unknown.code).toBe(1)
  expect(unknown.err).toMatch(/^palyra: (not_found|invalid_argument|conflict): /)
}, 60_000)
