import { Effect } from "effect"
import type { PalyraError } from "../../domain/Errors.js"
import type { SessionId } from "../../domain/Ids.js"
import type { Session } from "../../domain/Records.js"
import type { TapeEvent } from "../../domain/TapeEvent.js"
import type { Service as JournalService } from "../../ports/Journal.js"
import { carriesAttachments, scanned } from "../Attachments.js"

/**
 * The prompt history of recently active sessions, so a run reads only what was appended since the
 * session's previous run instead of its whole tape (a conversation's cost per turn stays flat as it
 * grows). Committed events never change, so an entry is extended, never invalidated; a new
 * `historyFromSeq` (a reset) starts a new entry. Bounded: the least recently used session is dropped
 * past `capacity`, and streamed `AssistantDelta`s (their text is in the `AssistantMessage` that ends
 * the turn; no prompt builder reads them) are kept only for the last ended run's last model call.
 * Branched sessions read through.
 *
 * @internal
 */
export interface HistoryCache {
  readonly load: (session: Session) => Effect.Effect<Array<TapeEvent>, PalyraError>
  /**
   * What a run committed, handed back at its end: `history` is what `load` answered with the run's
   * committed events appended from `from` on. They extend the session's entry only while their
   * `tapeSeq`s continue it without a gap (tape order is gap-free per session, so a gap is exactly
   * an append the run did not make: another writer's, another process's); from the first gap on,
   * the next `load` reads the tape as before.
   */
  readonly committed: (session: Session, history: ReadonlyArray<TapeEvent>, from: number) => void
  /**
   * A run's start commit, handed over by its admission (the events are in memory, their seqs the
   * journal's answer): the session's entry is extended by them under `committed`'s rule, or begun
   * with them when they are the first events after `historyFromSeq` (a new session, a reset). The
   * run's `load` then reads nothing when the entry reaches the session's head. A queued run's start
   * commit lands among the running run's events, which reach the entry only when that run ends: it
   * is held beside the entry (`ahead`) and merged in its place when they do.
   */
  readonly started: (session: Session, stored: ReadonlyArray<TapeEvent>) => void
  /** Sessions held (for tests). */
  readonly size: () => number
}

interface Entry {
  readonly fromSeq: number
  lastSeq: number
  readonly events: Array<TapeEvent>
  /**
   * Where the last ended run's events start in `events`: the deltas of its last model call are kept
   * until the next run ends, so the next run's history is gap-free from the previous run's last
   * prompt on (a prompt stage that folds incrementally — the context engine — takes that tail
   * without a read).
   */
  deltasFrom: number
  /**
   * Start commits of runs queued behind the running one (their seqs past a gap the running run's
   * events fill when it ends), in seq order: merged into `events` once the entry reaches them.
   */
  readonly ahead: Array<TapeEvent>
  /** Whether `events` holds a user message with attachments (checked as each event is taken in; only deltas are ever dropped). */
  attachments: boolean
}

const PAGE = 1024
/** Most events held `ahead` of an entry (a queued run's start commit is two). */
const AHEAD = 64

/** @internal */
export const makeHistoryCache = (
  journal: JournalService,
  uncached: (session: Session) => Effect.Effect<Array<TapeEvent>, PalyraError>,
  capacity = 128
): HistoryCache => {
  const entries = new Map<SessionId, Entry>()
  const keep = (e: TapeEvent) => e._tag !== "AssistantDelta"
  const take = (entry: Entry, e: TapeEvent) => {
    entry.events.push(e)
    if (!entry.attachments && carriesAttachments(e)) entry.attachments = true
  }
  const extend = (sessionId: SessionId, entry: Entry): Effect.Effect<Entry, PalyraError> =>
    Effect.flatMap(journal.readTape(sessionId, { afterSeq: entry.lastSeq, limit: PAGE }), (page) => {
      for (const e of page) if (keep(e)) take(entry, e)
      const last = page.at(-1)
      if (last !== undefined) entry.lastSeq = last.tapeSeq
      if (page.length === PAGE) return extend(sessionId, entry)
      takeAhead(entry)
      return Effect.succeed(entry)
    })
  /** Merge the held start commits that continue `entry`; drop those it already has. */
  const takeAhead = (entry: Entry) => {
    const ahead = entry.ahead
    let i = 0
    for (; i < ahead.length && ahead[i]!.tapeSeq <= entry.lastSeq + 1; i++) {
      const e = ahead[i]!
      if (e.tapeSeq <= entry.lastSeq) continue
      take(entry, e)
      entry.lastSeq = e.tapeSeq
    }
    if (i > 0) ahead.splice(0, i)
  }
  const hold = (sessionId: SessionId, entry: Entry) => {
    entries.set(sessionId, entry)
    while (entries.size > capacity) entries.delete(entries.keys().next().value!)
  }
  /**
   * Extend `entry` by `events` from `from` on while their `tapeSeq`s continue it without a gap,
   * keeping the deltas from index `deltasAt` on.
   */
  const append = (entry: Entry, events: ReadonlyArray<TapeEvent>, from: number, deltasAt: number) => {
    for (let i = from; i < events.length; i++) {
      const e = events[i]!
      if (e.tapeSeq <= entry.lastSeq) continue
      if (e.tapeSeq !== entry.lastSeq + 1) {
        // A gap: a queued run's start commit held beside the entry may fill it.
        if (entry.ahead.length === 0) return
        takeAhead(entry)
        if (e.tapeSeq !== entry.lastSeq + 1) return
      }
      if (i >= deltasAt || keep(e)) take(entry, e)
      entry.lastSeq = e.tapeSeq
    }
    if (entry.ahead.length > 0) takeAhead(entry)
  }
  /** Hold a start commit that does not continue `entry` yet (seq order; bounded: the rest is read). */
  const holdAhead = (entry: Entry, stored: ReadonlyArray<TapeEvent>) => {
    if (entry.ahead.length + stored.length > AHEAD) return
    const at = entry.ahead.findIndex((e) => e.tapeSeq > stored[0]!.tapeSeq)
    entry.ahead.splice(at < 0 ? entry.ahead.length : at, 0, ...stored)
  }
  /**
   * Where a run's last model call starts in `events` (from `from` on): only its deltas are kept — a
   * prompt stage folding incrementally folded everything before it when it built that call's prompt,
   * so the kept deltas are bounded by one call's, not by the run's.
   */
  const lastCall = (events: ReadonlyArray<TapeEvent>, from: number) => {
    for (let i = events.length - 1; i >= from; i--) if (events[i]!._tag === "ModelRequest") return i
    return from
  }
  /** Drop the deltas of the previously ended run (in place), before another run's are kept. */
  const settle = (entry: Entry) => {
    const events = entry.events
    let w = entry.deltasFrom
    for (let r = entry.deltasFrom; r < events.length; r++) {
      const e = events[r]!
      if (keep(e)) events[w++] = e
    }
    events.length = w
    entry.deltasFrom = w
  }
  const emptyEntry = (fromSeq: number): Entry => ({
    fromSeq,
    lastSeq: fromSeq,
    events: [],
    deltasFrom: 0,
    ahead: [],
    attachments: false
  })
  return {
    load: (session) => {
      if (session.parentId !== null) return uncached(session)
      const held = entries.get(session.id)
      const fresh = held === undefined || held.fromSeq !== session.historyFromSeq
      const entry: Entry = fresh ? emptyEntry(session.historyFromSeq) : held
      // Most recently used last: re-insert, then drop from the front past the capacity.
      entries.delete(session.id)
      // A held entry at the session's head (its run's start commit handed over by `started`) needs
      // no read: the journal answers its head from memory.
      const current = fresh
        ? extend(session.id, entry)
        : Effect.flatMap(journal.headSeq(session.id), (head) =>
            head === entry.lastSeq ? Effect.succeed(entry) : extend(session.id, entry)
          )
      return Effect.map(current, (e) => {
        hold(session.id, e)
        const history = [...e.events]
        // The attachments decorator's scan of this array is known already (it resumes from its end).
        scanned(history, e.attachments)
        return history
      })
    },
    committed: (session, history, from) => {
      const entry = entries.get(session.id)
      if (entry === undefined || session.parentId !== null || entry.fromSeq !== session.historyFromSeq) return
      settle(entry)
      append(entry, history, from, lastCall(history, from))
    },
    started: (session, stored) => {
      if (session.parentId !== null || stored.length === 0) return
      const held = entries.get(session.id)
      if (held !== undefined && held.fromSeq === session.historyFromSeq) {
        return stored[0]!.tapeSeq > held.lastSeq + 1 ? holdAhead(held, stored) : append(held, stored, 0, stored.length)
      }
      if (stored[0]!.tapeSeq !== session.historyFromSeq + 1) return
      const entry = emptyEntry(session.historyFromSeq)
      append(entry, stored, 0, stored.length)
      entries.delete(session.id)
      hold(session.id, entry)
    },
    size: () => entries.size
  }
}
