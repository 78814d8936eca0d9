import { create } from "@bufbuild/protobuf"
import { timestampFromMs } from "@bufbuild/protobuf/wkt"
import { type Caller, type Gateway, Ids } from "@palyra/core"
import { Effect } from "effect"
import * as pb from "../gen/palyra/v1/gateway_pb.js"
import { toPbEvent, toPbSession } from "./convert.js"

const sessionIdOf = (value: string) => Ids.parse(Ids.SessionId, value, "session_id")

/**
 * `SessionsService.CompactSession`, `ListCheckpoints` and `RestoreCheckpoint`: one Gateway call each
 * (ownership and the context engine's rules are the Gateway's).
 * @internal
 */
export const compactionHandlers = {
  compactSession: (g: Gateway.Service, caller: Caller.Caller, req: pb.CompactSessionRequest) =>
    Effect.gen(function* () {
      const c = yield* g.compactSession(caller, yield* sessionIdOf(req.sessionId), { preview: req.preview })
      return create(pb.CompactSessionResponseSchema, {
        applied: c.applied,
        sessionId: c.sessionId,
        fromSeq: BigInt(c.fromSeq),
        toSeq: BigInt(c.toSeq),
        summary: c.summary,
        strategy: c.strategy,
        summarizer: c.summarizer,
        rejected: c.rejected ?? "",
        tokensBefore: BigInt(c.tokensBefore),
        tokensAfter: BigInt(c.tokensAfter),
        checkpointId: c.checkpointId ?? "",
        ...(c.event === undefined ? {} : { event: toPbEvent(c.event) })
      })
    }),
  listCheckpoints: (g: Gateway.Service, caller: Caller.Caller, req: pb.ListCheckpointsRequest) =>
    Effect.gen(function* () {
      const list = yield* g.listCheckpoints(caller, yield* sessionIdOf(req.sessionId))
      return create(pb.ListCheckpointsResponseSchema, {
        checkpoints: list.map((c) =>
          create(pb.CheckpointSchema, {
            id: c.id,
            sessionId: c.sessionId,
            fromSeq: BigInt(c.fromSeq),
            toSeq: BigInt(c.toSeq),
            summary: c.summary,
            createdAt: timestampFromMs(c.createdAt),
            strategy: c.strategy,
            summarizer: c.summarizer,
            historyFromSeq: BigInt(c.historyFromSeq),
            resetGeneration: BigInt(c.resetGeneration),
            restoredSeq: BigInt(c.restoredSeq),
            tokensBefore: BigInt(c.tokensBefore),
            tokensAfter: BigInt(c.tokensAfter),
            pinnedNotes: c.pinnedNotes
          })
        )
      })
    }),
  restoreCheckpoint: (g: Gateway.Service, caller: Caller.Caller, req: pb.RestoreCheckpointRequest) =>
    Effect.gen(function* () {
      const r = yield* g.restoreCheckpoint(caller, yield* sessionIdOf(req.sessionId), req.checkpointId)
      return create(pb.RestoreCheckpointResponseSchema, { event: toPbEvent(r.event), session: toPbSession(r.session) })
    })
}
