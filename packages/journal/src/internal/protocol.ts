/**
 * What the journal's writer is asked to do, as plain data: every write to the journal's file is an
 * `Op`, already redacted and canonically encoded by the caller, so the writer needs no redactor and
 * may run on another thread (`writer-worker.ts`). A batch of ops crosses to the worker as TWO
 * strings (`encodeBatch`): a JSON header with the ops minus their event payloads, and the payloads
 * concatenated (their lengths are in the header), so the canonical JSON of an event is never escaped
 * a second time nor cloned as part of an object graph.
 * @internal
 */

/** One event row as stored (the payload is the redacted canonical JSON of its body). @internal */
export interface WireEvent {
  readonly tag: string
  readonly runId: string | null
  readonly at: number
  readonly payload: string
}

/** An append's effects, redacted, as statement parameters. @internal */
export interface WireEffects {
  readonly addTokens?: number | undefined
  /** The `insertRun` parameters, starting with the run id. */
  readonly createRun?: ReadonlyArray<unknown> | undefined
  readonly runTransition?:
    | {
        readonly runId: string
        readonly from: string
        readonly to: string
        readonly errorCode: string | null
        readonly errorMessage: string | null
        /** `to` is terminal: the run's `end_seq` is the append's last seq. */
        readonly ends?: boolean | undefined
      }
    | undefined
  /** The `insertApproval` parameters, starting with the approval id. */
  readonly createApproval?: ReadonlyArray<unknown> | undefined
  /** The `insertCheckpoint` parameters: id, session id, from, to, summary, state (JSON), created at. */
  readonly createCheckpoint?: ReadonlyArray<unknown> | undefined
  /** Create the append's session first (the same fields as the `createSession` op). */
  readonly createSession?: SessionCreation | undefined
}

/** A session to insert: its principal and key digest (for the uniqueness check), and its row. @internal */
export interface SessionCreation {
  readonly principal: string
  readonly digest: string | null
  /** The `insertSession` parameters (the key redacted), starting with the session id. */
  readonly params: ReadonlyArray<unknown>
}

/** @internal */
export interface AppendOp {
  readonly op: "append"
  readonly sessionId: string
  readonly events: ReadonlyArray<WireEvent>
  readonly effects: WireEffects
}

/** @internal */
export type Op =
  | AppendOp
  | ({
      readonly op: "createSession"
      readonly id: string
    } & SessionCreation)
  | { readonly op: "updateSession"; readonly id: string; readonly params: Record<string, unknown> }
  | {
      readonly op: "resolveApproval" | "useGrant" | "revokeGrant"
      readonly id: string
      readonly params: ReadonlyArray<unknown>
    }

/** What an op came to: an append's first seq, a write's changed rows and row, or a typed failure. @internal */
export type OpResult =
  | {
      readonly ok: true
      readonly seq?: number | undefined
      readonly changes?: number | undefined
      readonly row?: Record<string, unknown> | undefined
    }
  | {
      readonly ok: false
      readonly tag: "Conflict" | "NotFound" | "JournalError"
      readonly message: string
      readonly entity?: string | undefined
      readonly id?: string | undefined
    }

/** Main thread → worker. @internal */
export type ToWorker =
  | { readonly type: "batch"; readonly id: number; readonly header: string; readonly payloads: string }
  | { readonly type: "close" }

/**
 * Worker → main thread: the results of one batch, in op order, and the time its commits took. When
 * every op was an append that committed (the hot path), the results are only their first seqs, as
 * one transferable `Float64Array` (`seqs`): no array of objects is cloned on the worker and rebuilt
 * here. Otherwise `results` has one `OpResult` per op.
 * @internal
 */
export type FromWorker =
  | { readonly id: number; readonly ms: number; readonly seqs: Float64Array; readonly results?: undefined }
  | { readonly id: number; readonly ms: number; readonly results: ReadonlyArray<OpResult>; readonly seqs?: undefined }

/** A batch's answer: its first seqs alone when every op was an append that committed (see `FromWorker`). @internal */
export const encodeAnswer = (
  id: number,
  ms: number,
  results: ReadonlyArray<OpResult>
): { readonly reply: FromWorker; readonly transfer: ReadonlyArray<ArrayBuffer> } => {
  const seqs = new Float64Array(results.length)
  for (let i = 0; i < results.length; i++) {
    const r = results[i]!
    if (!r.ok || r.seq === undefined || r.changes !== undefined || r.row !== undefined)
      return { reply: { id, ms, results }, transfer: [] }
    seqs[i] = r.seq
  }
  return { reply: { id, ms, seqs }, transfer: [seqs.buffer as ArrayBuffer] }
}

type HeaderOp =
  | Exclude<Op, AppendOp>
  | (Omit<AppendOp, "events"> & { readonly events: ReadonlyArray<HeaderEvent> })
  | PlainAppend
type HeaderEvent = readonly [tag: string, runId: string | null, at: number, payloadLength: number]
/**
 * An append with no effect but its tokens (the hot path: almost every append) as one flat array —
 * `[sessionId, addTokens, tag, runId, at, payloadLength, tag, …]` — instead of an object with an
 * `effects` object and an array of tuples: a third of the header's text, and `JSON.parse` builds one
 * array per append instead of four objects (measured ~0.2 µs less an append to decode, ~0.1 to encode).
 */
type PlainAppend = ReadonlyArray<string | number | null>

/**
 * Effects the writer has nothing to do for but count tokens (see `PlainAppend`): no field set but
 * `addTokens`. Checked by what is there, not by a list of known effects, so an effect added to
 * `WireEffects` later crosses in the object form rather than being dropped here.
 */
const isPlain = (e: WireEffects) => {
  for (const k in e) if (k !== "addTokens" && e[k as keyof WireEffects] !== undefined) return false
  return true
}

/** The effects of a plain append without tokens: one shared object, never mutated. */
const NO_EFFECTS: WireEffects = Object.freeze({})

/**
 * One batch of ops as two strings: the header (JSON of the ops minus their payloads, a plain append
 * as a flat array: `PlainAppend`) and the payloads concatenated. Posted as they are: a string is
 * copied flat by the structured clone, which measured ~2× cheaper than UTF-8 encoding the text into
 * a transferable buffer (event text with any non-Latin-1 character is a two-byte string, slow to
 * transcode) and saves the worker a decode.
 * @internal
 */
export const encodeBatch = (ops: ReadonlyArray<Op>): { readonly header: string; readonly payloads: string } => {
  let payloads = ""
  const header: Array<HeaderOp> = ops.map((op) => {
    if (op.op !== "append") return op
    if (isPlain(op.effects)) {
      const row: Array<string | number | null> = [op.sessionId, op.effects.addTokens ?? 0]
      for (const e of op.events) {
        payloads += e.payload
        row.push(e.tag, e.runId, e.at, e.payload.length)
      }
      return row
    }
    return {
      op: "append",
      sessionId: op.sessionId,
      effects: op.effects,
      events: op.events.map((e): HeaderEvent => {
        payloads += e.payload
        return [e.tag, e.runId, e.at, e.payload.length]
      })
    }
  })
  return { header: JSON.stringify(header), payloads }
}

/** The ops `encodeBatch` encoded. @internal */
export const decodeBatch = (encoded: { readonly header: string; readonly payloads: string }): Array<Op> => {
  const header = JSON.parse(encoded.header) as Array<HeaderOp>
  const text = encoded.payloads
  let offset = 0
  /** The next `length` characters of the concatenated payloads. */
  const payload = (length: number) => {
    const taken = text.slice(offset, offset + length)
    offset += length
    return taken
  }
  const ops = new Array<Op>(header.length)
  for (let k = 0; k < header.length; k++) {
    const op = header[k]!
    if (Array.isArray(op)) {
      const row = op as PlainAppend
      const events: Array<WireEvent> = []
      for (let i = 2; i < row.length; i += 4)
        events.push({
          tag: row[i] as string,
          runId: row[i + 1] as string | null,
          at: row[i + 2] as number,
          payload: payload(row[i + 3] as number)
        })
      const addTokens = row[1] as number
      ops[k] = {
        op: "append",
        sessionId: row[0] as string,
        effects: addTokens === 0 ? NO_EFFECTS : { addTokens },
        events
      }
      continue
    }
    const o = op as Exclude<HeaderOp, PlainAppend>
    if (o.op !== "append") {
      ops[k] = o
      continue
    }
    ops[k] = {
      op: "append",
      sessionId: o.sessionId,
      effects: o.effects,
      events: o.events.map(([tag, runId, at, length]) => ({ tag, runId, at, payload: payload(length) }))
    }
  }
  return ops
}
