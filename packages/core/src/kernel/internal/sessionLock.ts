import { Effect } from "effect"

interface Waiter {
  /** Set by the holder that handed the lock to this waiter (before it calls `wake`). */
  granted: boolean
  readonly wake: () => void
}

interface Entry {
  held: boolean
  /** Waiters in arrival order; `head` indexes the first one still waiting (no `shift` per release). */
  readonly waiters: Array<Waiter>
  head: number
}

/**
 * Mutual exclusion per key, FIFO, with the lock handed over directly from its holder to the next
 * waiter. An uncontended `withLock` costs a map lookup and one `ensuring`: no semaphore, no
 * `acquireUseRelease`, no async step (the Effect `Semaphore` takes every permit through an async
 * registration and schedules its waiters on release, a fiber hop per append on the tape's hot path).
 *
 * A waiter interrupted after it was handed the lock (its `granted` set, but its fiber interrupted
 * before it resumed) passes the lock on to the next waiter from its interruption handler, so a
 * session never deadlocks. Keys with no holder and no waiter are forgotten.
 *
 * @internal
 */
export interface KeyedLock<K> {
  readonly withLock: <A, E, R>(key: K, effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  /**
   * `withLock` with `effect` run uninterruptibly (the wait for the lock stays interruptible, as in
   * `withLock`): the same as `withLock(key, Effect.uninterruptible(effect))` without the two
   * interruptibility regions per call.
   */
  readonly withLockUninterruptible: <A, E, R>(key: K, effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  /**
   * The lock as plain calls, for a holder that is not a fiber (the tape's append, which holds it
   * from its submit to the journal's callback). `acquire` calls `granted` once the lock is this
   * caller's — at once when it is free, else when the holder before it calls `release` — and returns
   * a ticket that `cancel`s the wait (true when it was still waiting). The holder must `release(key)`.
   * The Effect forms and these share one queue per key.
   */
  readonly acquire: (key: K, granted: () => void) => Ticket
  readonly release: (key: K) => void
  /** Keys currently held or waited on (for tests). */
  readonly size: () => number
}

/** A place in a key's queue (`KeyedLock.acquire`). @internal */
export interface Ticket {
  /** Leave the queue if still waiting (true); false once the lock was granted. */
  readonly cancel: () => boolean
}

const grantedTicket: Ticket = { cancel: () => false }

/** @internal */
export const makeKeyedLock = <K>(): KeyedLock<K> => {
  const entries = new Map<K, Entry>()

  const release = (key: K, entry: Entry) => {
    while (entry.head < entry.waiters.length) {
      const next = entry.waiters[entry.head]!
      entry.waiters[entry.head++] = undefined as unknown as Waiter
      if (entry.head === entry.waiters.length) {
        entry.waiters.length = 0
        entry.head = 0
      }
      next.granted = true
      next.wake()
      return
    }
    entry.held = false
    entries.delete(key)
  }

  const wait = (key: K, entry: Entry): Effect.Effect<void> =>
    Effect.async<void>((resume) => {
      const waiter: Waiter = { granted: false, wake: () => resume(Effect.void) }
      entry.waiters.push(waiter)
      // Interrupted while waiting: leave the queue, or, if the lock was already handed to us, pass it on.
      return Effect.sync(() => {
        if (waiter.granted) return release(key, entry)
        const i = entry.waiters.indexOf(waiter, entry.head)
        if (i >= 0) entry.waiters.splice(i, 1)
      })
    })

  const locked = <A, E, R>(key: K, effect: Effect.Effect<A, E, R>, interruptible: boolean): Effect.Effect<A, E, R> =>
    Effect.uninterruptibleMask((restore) =>
      Effect.suspend(() => {
        let entry = entries.get(key)
        if (entry === undefined) {
          entry = { held: false, waiters: [], head: 0 }
          entries.set(key, entry)
        }
        const held = entry
        const body = Effect.ensuring(
          interruptible ? restore(effect) : effect,
          Effect.sync(() => release(key, held))
        )
        if (!held.held) {
          held.held = true
          return body
        }
        return Effect.zipRight(restore(wait(key, held)), body)
      })
    )

  const acquire = (key: K, granted: () => void): Ticket => {
    let entry = entries.get(key)
    if (entry === undefined) {
      entry = { held: false, waiters: [], head: 0 }
      entries.set(key, entry)
    }
    if (!entry.held) {
      entry.held = true
      granted()
      return grantedTicket
    }
    const held = entry
    const waiter: Waiter = { granted: false, wake: granted }
    held.waiters.push(waiter)
    return {
      cancel: () => {
        if (waiter.granted) return false
        const i = held.waiters.indexOf(waiter, held.head)
        if (i >= 0) held.waiters.splice(i, 1)
        return true
      }
    }
  }

  return {
    acquire,
    release: (key) => {
      const entry = entries.get(key)
      if (entry !== undefined) release(key, entry)
    },
    withLock: (key, effect) => locked(key, effect, true),
    withLockUninterruptible: (key, effect) => locked(key, effect, false),
    size: () => entries.size
  }
}
