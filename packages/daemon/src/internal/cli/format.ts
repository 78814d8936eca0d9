/**
 * How the CLI prints records and events: one line (or block) each as text, and with `--json` the
 * contract's own encoding (what the HTTP API sends), so `palyra … --json | jq` sees the API's shape.
 */
import type { Records, TapeEvent } from "@palyra/core"
import type { Api } from "@palyra/transport-http"

type Compaction = typeof Api.Compaction.Type
type Checkpoint = typeof Api.CheckpointInfo.Type
type AgentInfo = typeof Api.AgentInfo.Type

const iso = (ms: number | null) => (ms === null ? "-" : new Date(ms).toISOString())

/** @internal */
export const session = (s: Records.Session) =>
  `${s.id}  ${(s.key ?? "-").padEnd(12)} ${s.principal.padEnd(10)} tokens ${s.tokensUsed}  updated ${iso(s.updatedAt)}\n`

/** @internal */
export const sessionDetail = (s: Records.Session, tapeEvents: number) =>
  `${[
    `session   ${s.id}`,
    `key       ${s.key ?? "-"}`,
    `principal ${s.principal}`,
    `channel   ${s.channel ?? "-"}`,
    `title     ${s.title ?? "-"}`,
    ...(s.parentId === null ? [] : [`parent    ${s.parentId} at tape_seq ${s.parentSeq ?? "-"}`]),
    `reset     generation ${s.resetGeneration} (history from tape_seq ${s.historyFromSeq})`,
    `tokens    ${s.tokensUsed}`,
    `archived  ${s.archived ? "yes" : "no"}`,
    `created   ${iso(s.createdAt)}`,
    `updated   ${iso(s.updatedAt)}`,
    `${tapeEvents} tape events`
  ].join("\n")}\n`

/** @internal */
export const approval = (a: Records.ApprovalRecord) =>
  `${a.id}  ${a.status.padEnd(8)} ${a.risk.padEnd(9)} ${a.tool}  ${a.summary}\n`

/** @internal */
export const grant = (g: typeof Api.Grant.Type) => {
  const limits = [
    g.grantMaxUses === null ? `${g.grantUses} uses` : `${g.grantUses}/${g.grantMaxUses} uses`,
    g.grantExpiresAt === null ? "no expiry" : `expires ${iso(g.grantExpiresAt)}`
  ].join(", ")
  return `${g.id}  ${g.status.padEnd(8)} ${g.scope.padEnd(8)} ${g.principal} ${g.tool} (${limits})\n${g.policy ?? ""}\n\n`
}

/** One tape event on one line: seq, time, tag, run, then the rest as JSON (cut at 160 characters). @internal */
export const event = (e: TapeEvent.TapeEvent) => {
  const { _tag, tapeSeq, at, sessionId: _session, runId, ...rest } = e
  return `${String(tapeSeq).padStart(5)}  ${iso(at)}  ${_tag.padEnd(18)} ${runId === null ? "" : `${runId.slice(-6)} `}${JSON.stringify(rest).slice(0, 160)}\n`
}

/** @internal */
export const compaction = (c: Compaction) =>
  [
    c.applied
      ? `compacted tape_seq ${c.fromSeq}..${c.toSeq} (${c.summarizer} summary, ${c.strategy}): ${c.tokensBefore} → ${c.tokensAfter} tokens${c.checkpointId === undefined ? "" : `; checkpoint ${c.checkpointId}`}`
      : `preview: tape_seq ${c.fromSeq}..${c.toSeq} would become this ${c.summarizer} summary (${c.tokensBefore} → ${c.tokensAfter} tokens); nothing changed`,
    ...(c.rejected === undefined ? [] : [`(the model's summary was rejected: ${c.rejected}; this one is extractive)`]),
    ...(c.summary.length > 0 ? ["", c.summary] : []),
    ""
  ].join("\n")

/** @internal */
export const checkpoint = (c: Checkpoint) =>
  `${c.id}  ${iso(c.createdAt)}  tape_seq ${c.fromSeq}..${c.toSeq}  ${c.tokensBefore} → ${c.tokensAfter} tokens  ${c.summarizer}\n`

/** @internal */
export const agent = (a: AgentInfo) =>
  `${a.id.padEnd(16)} ${a.description ?? ""}\n  models: ${a.models.join(" > ") || "(the daemon's)"}  tools: ${a.tools.join(", ") || "(none)"}\n`
