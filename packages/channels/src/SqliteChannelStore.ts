/**
 * The `ChannelStore` on its own SQLite file (better-sqlite3, as the journal uses): WAL, STRICT
 * tables, `secure_delete`, versioned migrations (`PRAGMA user_version`), and a file marker
 * (`PRAGMA application_id`) so a journal or any other database is refused rather than written to.
 * A file written by a newer version is refused too.
 *
 * Every method is one short statement or transaction on the caller's thread; nothing awaits inside
 * a transaction.
 *
 * @since 0.1.0
 */
import { Errors } from "@palyra/core"
import Database from "better-sqlite3"
import { Effect, Layer, Option, type Scope } from "effect"
import {
  type ApprovalCode,
  type Attempts,
  type Binding,
  ChannelStore,
  type Delivery,
  type DeliveryState,
  isActive,
  nextAttempts,
  type PairingCode,
  type Service,
  type Watch
} from "./ChannelStore.js"
import { APPLICATION_ID, migrations } from "./internal/migrations.js"
import type { Reason } from "./Rejection.js"

/** @since 0.1.0 @category Models */
export interface Options {
  /** A file path, or `:memory:`. */
  readonly filename: string
  /** `NORMAL` (default: survives process crashes) or `FULL` (also survives power loss). */
  readonly synchronous?: "NORMAL" | "FULL" | undefined
  /** How long to wait for a lock held by another connection (default 5,000 ms). */
  readonly busyTimeoutMs?: number | undefined
}

const fail = (method: string, message: string, cause?: unknown) =>
  new Errors.JournalError({ method: `ChannelStore.${method}`, message, cause })

type Row = Record<string, unknown>
const str = (v: unknown) => v as string
const num = (v: unknown) => v as number
const strOrNull = (v: unknown) => (v === null ? null : (v as string))
const numOrNull = (v: unknown) => (v === null ? null : (v as number))

const toBinding = (r: Row): Binding => ({
  channel: str(r.channel),
  account: str(r.account),
  senderId: str(r.sender_id),
  principal: str(r.principal),
  createdAt: num(r.created_at),
  createdBy: str(r.created_by),
  expiresAt: numOrNull(r.expires_at),
  revokedAt: numOrNull(r.revoked_at)
})
const toPairingCode = (r: Row): PairingCode => ({
  digest: str(r.digest),
  channel: str(r.channel),
  principal: str(r.principal),
  createdBy: str(r.created_by),
  createdAt: num(r.created_at),
  expiresAt: num(r.expires_at),
  bindingTtlMs: numOrNull(r.binding_ttl_ms),
  usedAt: numOrNull(r.used_at),
  revokedAt: numOrNull(r.revoked_at)
})
const toAttempts = (r: Row): Attempts => ({
  failures: num(r.failures),
  windowStart: num(r.window_start),
  lockedUntil: numOrNull(r.locked_until),
  lastHintAt: numOrNull(r.last_hint_at)
})
const toDelivery = (r: Row): Delivery => ({
  seq: num(r.seq),
  key: str(r.key),
  channel: str(r.channel),
  account: str(r.account),
  conversation: str(r.conversation),
  thread: strOrNull(r.thread),
  replyTo: strOrNull(r.reply_to),
  sessionId: strOrNull(r.session_id),
  runId: strOrNull(r.run_id),
  part: str(r.part),
  text: str(r.text),
  state: str(r.state) as DeliveryState,
  attempts: num(r.attempts),
  nextAttemptAt: num(r.next_attempt_at),
  platformMessageId: strOrNull(r.platform_message_id),
  error: strOrNull(r.error),
  createdAt: num(r.created_at),
  updatedAt: num(r.updated_at)
})
const toApprovalCode = (r: Row): ApprovalCode => ({
  code: str(r.code),
  approvalId: str(r.approval_id),
  channel: str(r.channel),
  conversation: str(r.conversation),
  principal: str(r.principal),
  createdAt: num(r.created_at),
  expiresAt: num(r.expires_at)
})
const toWatch = (r: Row): Watch => ({
  runId: str(r.run_id),
  sessionId: str(r.session_id),
  principal: str(r.principal),
  channel: str(r.channel),
  account: str(r.account),
  senderId: str(r.sender_id),
  conversation: str(r.conversation),
  thread: strOrNull(r.thread),
  replyTo: strOrNull(r.reply_to),
  createdAt: num(r.created_at)
})

/** Open (and migrate) the file. @internal */
const open = (options: Options): Database.Database => {
  const db = new Database(options.filename)
  try {
    const appId = db.pragma("application_id", { simple: true }) as number
    const version = db.pragma("user_version", { simple: true }) as number
    const empty = (db.prepare("SELECT count(*) AS n FROM sqlite_schema").get() as { n: number }).n === 0
    if (appId !== APPLICATION_ID && !(appId === 0 && empty)) {
      throw new Error("the file is not a Palyra channel store (another application's or a journal's database)")
    }
    if (version > migrations.length) {
      throw new Error(`the file has schema version ${version}, newer than this version knows (${migrations.length})`)
    }
    if (options.filename !== ":memory:") db.pragma("journal_mode = WAL")
    db.pragma(`synchronous = ${options.synchronous ?? "NORMAL"}`)
    db.pragma(`busy_timeout = ${options.busyTimeoutMs ?? 5000}`)
    db.pragma("secure_delete = ON")
    db.transaction(() => {
      for (let v = version; v < migrations.length; v++) db.exec(migrations[v]!)
      db.pragma(`user_version = ${migrations.length}`)
      db.pragma(`application_id = ${APPLICATION_ID}`)
    }).immediate()
    return db
  } catch (e) {
    db.close()
    throw e
  }
}

/**
 * Open a channel store on `options.filename`; closed when the scope closes.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = (options: Options): Effect.Effect<Service, Errors.JournalError, Scope.Scope> =>
  Effect.gen(function* () {
    const db = yield* Effect.acquireRelease(
      Effect.try({
        try: () => open(options),
        catch: (e) => fail("open", `cannot open ${options.filename}: ${e instanceof Error ? e.message : String(e)}`, e)
      }),
      (db) => Effect.sync(() => db.close())
    )
    const q = <A>(method: string, f: () => A) =>
      Effect.try({ try: f, catch: (e) => fail(method, "the channel store could not read or write", e) })
    const stmt = (sql: string) => db.prepare(sql)

    const claim = stmt("INSERT OR IGNORE INTO inbound (channel, platform_message_id, received_at) VALUES (?, ?, ?)")
    const prune = stmt("DELETE FROM inbound WHERE received_at < ?")
    const insertCode = stmt(
      `INSERT INTO pairing_codes (digest, channel, principal, created_by, created_at, expires_at, binding_ttl_ms, used_at)
       VALUES (@digest, @channel, @principal, @createdBy, @createdAt, @expiresAt, @bindingTtlMs, @usedAt)`
    )
    const useCode = stmt(
      "UPDATE pairing_codes SET used_at = @at WHERE digest = @digest AND channel = @channel AND used_at IS NULL AND revoked_at IS NULL AND expires_at > @at RETURNING principal, binding_ttl_ms"
    )
    const selectCodes = stmt(
      "SELECT * FROM pairing_codes WHERE (@channel IS NULL OR channel = @channel) ORDER BY created_at DESC, digest"
    )
    const revokeCode = stmt(
      "UPDATE pairing_codes SET revoked_at = @at WHERE digest = @digest AND used_at IS NULL AND revoked_at IS NULL RETURNING *"
    )
    const upsertBinding = stmt(
      `INSERT INTO bindings (channel, account, sender_id, principal, created_at, created_by, expires_at, revoked_at)
       VALUES (@channel, @account, @senderId, @principal, @createdAt, @createdBy, @expiresAt, @revokedAt)
       ON CONFLICT (channel, account, sender_id) DO UPDATE SET principal = excluded.principal,
         created_at = excluded.created_at, created_by = excluded.created_by, expires_at = excluded.expires_at,
         revoked_at = excluded.revoked_at`
    )
    const selectBinding = stmt("SELECT * FROM bindings WHERE channel = ? AND account = ? AND sender_id = ?")
    const revoke = stmt(
      "UPDATE bindings SET revoked_at = ? WHERE channel = ? AND account = ? AND sender_id = ? AND revoked_at IS NULL"
    )
    const selectAttempts = stmt("SELECT * FROM attempts WHERE channel = ? AND account = ? AND sender_id = ?")
    const upsertAttempts = stmt(
      `INSERT INTO attempts (channel, account, sender_id, failures, window_start, locked_until, last_hint_at)
       VALUES (@channel, @account, @senderId, @failures, @windowStart, @lockedUntil, @lastHintAt)
       ON CONFLICT (channel, account, sender_id) DO UPDATE SET failures = excluded.failures,
         window_start = excluded.window_start, locked_until = excluded.locked_until, last_hint_at = excluded.last_hint_at`
    )
    const deleteAttempts = stmt("DELETE FROM attempts WHERE channel = ? AND account = ? AND sender_id = ?")
    const insertDelivery = stmt(
      `INSERT OR IGNORE INTO outbox (key, channel, account, conversation, thread, reply_to, session_id, run_id, part, text,
         state, attempts, next_attempt_at, created_at, updated_at)
       VALUES (@key, @channel, @account, @conversation, @thread, @replyTo, @sessionId, @runId, @part, @text,
         'pending', 0, @createdAt, @createdAt, @createdAt)`
    )
    // The oldest pending delivery of each conversation: later ones wait behind it.
    const HEADS = `SELECT * FROM outbox o WHERE o.channel = @channel AND o.state = 'pending' AND NOT EXISTS (
        SELECT 1 FROM outbox p WHERE p.channel = o.channel AND p.conversation = o.conversation
          AND p.state = 'pending' AND p.seq < o.seq)`
    const selectDue = stmt(`${HEADS} AND o.next_attempt_at <= @now ORDER BY o.seq LIMIT @limit`)
    const selectNextDue = stmt(`SELECT min(next_attempt_at) AS at FROM (${HEADS})`)
    const patchDelivery = stmt(
      `UPDATE outbox SET state = @state, attempts = coalesce(@attempts, attempts),
         next_attempt_at = coalesce(@nextAttemptAt, next_attempt_at),
         platform_message_id = CASE WHEN @setPlatformId THEN @platformMessageId ELSE platform_message_id END,
         error = CASE WHEN @setError THEN @error ELSE error END, updated_at = @at
       WHERE key = @key`
    )
    const selectApprovalByApproval = stmt("SELECT * FROM approval_codes WHERE approval_id = ?")
    const selectApprovalCode = stmt("SELECT * FROM approval_codes WHERE code = ?")
    const insertApprovalCode = stmt(
      `INSERT INTO approval_codes (code, approval_id, channel, conversation, principal, created_at, expires_at)
       VALUES (@code, @approvalId, @channel, @conversation, @principal, @createdAt, @expiresAt)`
    )
    const insertWatch = stmt(
      `INSERT OR REPLACE INTO watches (run_id, session_id, principal, channel, account, sender_id, conversation, thread, reply_to, created_at)
       VALUES (@runId, @sessionId, @principal, @channel, @account, @senderId, @conversation, @thread, @replyTo, @createdAt)`
    )
    const deleteWatch = stmt("DELETE FROM watches WHERE run_id = ?")
    const selectWatches = stmt("SELECT * FROM watches WHERE channel = ? ORDER BY created_at, run_id")
    const selectBindings = stmt(
      "SELECT * FROM bindings WHERE (@channel IS NULL OR channel = @channel) AND (@principal IS NULL OR principal = @principal) ORDER BY created_at"
    )
    const selectDeliveries = stmt(
      `SELECT * FROM outbox WHERE (@channel IS NULL OR channel = @channel) AND (@state IS NULL OR state = @state)
       AND (@sessionId IS NULL OR session_id = @sessionId) ORDER BY seq`
    )
    const selectRejections = stmt(
      "SELECT * FROM rejections WHERE (@channel IS NULL OR channel = @channel) ORDER BY channel, reason"
    )
    const bumpRejection = stmt(
      `INSERT INTO rejections (channel, reason, count, last_at) VALUES (?, ?, 1, ?)
       ON CONFLICT (channel, reason) DO UPDATE SET count = count + 1, last_at = excluded.last_at`
    )

    const redeem = db.transaction((digest: string, identity: Binding, at: number): Option.Option<Binding> => {
      const used = useCode.get({ digest, channel: identity.channel, at }) as
        | { principal: string; binding_ttl_ms: number | null }
        | undefined
      if (used === undefined) return Option.none()
      const binding: Binding = {
        ...identity,
        principal: used.principal,
        expiresAt: used.binding_ttl_ms === null ? null : at + used.binding_ttl_ms
      }
      upsertBinding.run(binding)
      deleteAttempts.run(identity.channel, identity.account, identity.senderId)
      return Option.some(binding)
    })
    const enqueueAll = db.transaction((rows: ReadonlyArray<Parameters<Service["enqueue"]>[0][number]>) =>
      rows.map((d) => insertDelivery.run(d).changes === 1)
    )
    const putCode = db.transaction((code: ApprovalCode): ApprovalCode | "taken" => {
      const existing = selectApprovalByApproval.get(code.approvalId) as Row | undefined
      if (existing !== undefined) return toApprovalCode(existing)
      if (selectApprovalCode.get(code.code) !== undefined) return "taken"
      insertApprovalCode.run(code)
      return code
    })
    const failure = db.transaction(
      (i: Parameters<Service["recordFailure"]>[0], at: number, policy: Parameters<Service["recordFailure"]>[2]) => {
        const row = selectAttempts.get(i.channel, i.account, i.senderId) as Row | undefined
        const next = nextAttempts(row === undefined ? undefined : toAttempts(row), at, policy)
        upsertAttempts.run({ ...i, ...next })
        return next
      }
    )
    const hint = db.transaction((i: Parameters<Service["claimHint"]>[0], at: number, intervalMs: number) => {
      const row = selectAttempts.get(i.channel, i.account, i.senderId) as Row | undefined
      const a = row === undefined ? undefined : toAttempts(row)
      if (a?.lastHintAt != null && at - a.lastHintAt < intervalMs) return false
      upsertAttempts.run({
        ...i,
        failures: a?.failures ?? 0,
        windowStart: a?.windowStart ?? at,
        lockedUntil: a?.lockedUntil ?? null,
        lastHintAt: at
      })
      return true
    })

    const service: Service = {
      claimInbound: (channel, id, at) => q("claimInbound", () => claim.run(channel, id, at).changes === 1),
      pruneInbound: (before) => q("pruneInbound", () => prune.run(before).changes),
      putPairingCode: (code: PairingCode) =>
        q("putPairingCode", () => insertCode.run(code).changes).pipe(
          Effect.catchIf(
            (e) => String((e.cause as { code?: string } | undefined)?.code ?? "").startsWith("SQLITE_CONSTRAINT"),
            () => Effect.fail(new Errors.Conflict({ message: "pairing code already exists" }))
          ),
          Effect.asVoid
        ),
      redeemPairingCode: ({ digest, identity, at }) =>
        q("redeemPairingCode", () =>
          redeem(
            digest,
            { ...identity, principal: "", createdAt: at, createdBy: "pairing-code", expiresAt: null, revokedAt: null },
            at
          )
        ),
      listPairingCodes: (filter) =>
        q("listPairingCodes", () =>
          (selectCodes.all({ channel: filter.channel ?? null }) as Array<Row>).map(toPairingCode)
        ),
      revokePairingCode: (digest, at) =>
        q("revokePairingCode", () => {
          const row = revokeCode.get({ digest, at }) as Row | undefined
          return row === undefined ? Option.none() : Option.some(toPairingCode(row))
        }),
      putBinding: (binding) => q("putBinding", () => void upsertBinding.run(binding)),
      getBinding: (i, at) =>
        q("getBinding", () => {
          const row = selectBinding.get(i.channel, i.account, i.senderId) as Row | undefined
          return Option.filter(Option.fromNullable(row === undefined ? undefined : toBinding(row)), (b) =>
            isActive(b, at)
          )
        }),
      revokeBinding: (i, at) =>
        q("revokeBinding", () => {
          const row = selectBinding.get(i.channel, i.account, i.senderId) as Row | undefined
          if (row === undefined || !isActive(toBinding(row), at)) return Option.none()
          revoke.run(at, i.channel, i.account, i.senderId)
          return Option.some({ ...toBinding(row), revokedAt: at })
        }),
      listBindings: (filter) =>
        q("listBindings", () =>
          (
            selectBindings.all({ channel: filter.channel ?? null, principal: filter.principal ?? null }) as Array<Row>
          ).map(toBinding)
        ),
      getAttempts: (i) =>
        q("getAttempts", () => {
          const row = selectAttempts.get(i.channel, i.account, i.senderId) as Row | undefined
          return row === undefined ? Option.none() : Option.some(toAttempts(row))
        }),
      recordFailure: (i, at, policy) => q("recordFailure", () => failure(i, at, policy)),
      clearFailures: (i) => q("clearFailures", () => void deleteAttempts.run(i.channel, i.account, i.senderId)),
      claimHint: (i, at, intervalMs) => q("claimHint", () => hint(i, at, intervalMs)),
      enqueue: (deliveries) => q("enqueue", () => enqueueAll(deliveries)),
      due: (channel, now, limit) =>
        q("due", () => (selectDue.all({ channel, now, limit }) as Array<Row>).map(toDelivery)),
      nextDueAt: (channel) =>
        q("nextDueAt", () => Option.fromNullable((selectNextDue.get({ channel }) as { at: number | null }).at)),
      updateDelivery: (key, patch, at) =>
        q(
          "updateDelivery",
          () =>
            void patchDelivery.run({
              key,
              at,
              state: patch.state,
              attempts: patch.attempts ?? null,
              nextAttemptAt: patch.nextAttemptAt ?? null,
              setPlatformId: patch.platformMessageId === undefined ? 0 : 1,
              platformMessageId: patch.platformMessageId ?? null,
              setError: patch.error === undefined ? 0 : 1,
              error: patch.error ?? null
            })
        ),
      listDeliveries: (filter) =>
        q("listDeliveries", () =>
          (
            selectDeliveries.all({
              channel: filter.channel ?? null,
              state: filter.state ?? null,
              sessionId: filter.sessionId ?? null
            }) as Array<Row>
          ).map(toDelivery)
        ),
      putApprovalCode: (code) =>
        q("putApprovalCode", () => putCode(code)).pipe(
          Effect.flatMap((r) =>
            r === "taken" ? Effect.fail(new Errors.Conflict({ message: "approval code taken" })) : Effect.succeed(r)
          )
        ),
      getApprovalCode: (code) =>
        q("getApprovalCode", () => {
          const row = selectApprovalCode.get(code) as Row | undefined
          return row === undefined ? Option.none() : Option.some(toApprovalCode(row))
        }),
      putWatch: (watch) => q("putWatch", () => void insertWatch.run(watch)),
      endWatch: (runId) => q("endWatch", () => void deleteWatch.run(runId)),
      listWatches: (channel) => q("listWatches", () => (selectWatches.all(channel) as Array<Row>).map(toWatch)),
      recordRejection: (channel, reason, at) => q("recordRejection", () => void bumpRejection.run(channel, reason, at)),
      rejections: (channel) =>
        q("rejections", () =>
          (selectRejections.all({ channel: channel ?? null }) as Array<Row>).map((r) => ({
            channel: str(r.channel),
            reason: str(r.reason) as Reason,
            count: num(r.count),
            lastAt: num(r.last_at)
          }))
        )
    }
    return service
  })

/** @since 0.1.0 @category Layers */
export const layer = (options: Options): Layer.Layer<ChannelStore, Errors.JournalError> =>
  Layer.scoped(ChannelStore, make(options))
