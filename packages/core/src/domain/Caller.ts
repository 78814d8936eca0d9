/**
 * Who is calling the Gateway. Every Gateway method that reads or changes a session, run, approval,
 * grant or the journal takes a `Caller`; ownership and operator checks happen there, once, so a
 * transport, a channel or a console cannot forget them. Transports only authenticate (credential →
 * `Caller`).
 *
 * @since 0.1.0
 */

/** A platform identity a channel message came from (set by channel connectors). @since 0.1.0 @category Models */
export interface ChannelIdentity {
  readonly channel: string
  readonly account: string
  readonly senderId: string
}

/** @since 0.1.0 @category Models */
export interface Caller {
  /** The principal acting: sessions, runs, approvals and grants it creates belong to it. */
  readonly principal: string
  /** Operators may act on every principal's sessions, runs, approvals and grants, and verify the journal. */
  readonly operator: boolean
  /** Set when the call comes from a chat platform. */
  readonly channel?: ChannelIdentity | undefined
}

/** A caller acting for `principal` only. @since 0.1.0 @category Constructors */
export const user = (principal: string, channel?: ChannelIdentity): Caller =>
  channel === undefined ? { principal, operator: false } : { principal, operator: false, channel }

/** An operator: may act on everything. @since 0.1.0 @category Constructors */
export const operator = (principal: string): Caller => ({ principal, operator: true })

/** Whether `caller` may see and act on what `owner` owns. @since 0.1.0 @category Predicates */
export const owns = (caller: Caller, owner: string): boolean => caller.operator || caller.principal === owner

/** The principal a listing is narrowed to: none for operators, the caller's own otherwise. @since 0.1.0 @category Utils */
export const scope = (caller: Caller): string | undefined => (caller.operator ? undefined : caller.principal)
