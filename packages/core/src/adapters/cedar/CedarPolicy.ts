/**
 * The Cedar policy engine (`@cedar-policy/cedar-wasm`).
 *
 * Entities: `Palyra::Principal`, `Palyra::Tool` (attributes `risk`, `category`), actions
 * `Palyra::Action::"tool.execute"` and `"tool.request_approval"`; the context carries the session,
 * channel, agent, a digest of the arguments and the time. The decision rule is the one every Palyra engine
 * follows (see `PolicyEngine`), and every decision names the policies that made it: a policy's
 * `@id("…")` annotation (or Cedar's own positional id, `policy0`, `policy1`, …) and its
 * `@reason("…")`.
 *
 * Everything the engine knows about a policy (its id, reason, effect, action scope, whether it reads
 * the clock) comes from Cedar's own parser, through the JSON form of each policy. Policies are
 * validated against the schema and pre-parsed once per version; a reload that fails keeps the old
 * set in force and returns Cedar's diagnostics. Standing approval grants become narrow `permit`
 * policies, built as JSON, in the same set. Decisions are cached exactly, keyed by the whole
 * request; every policy or grant change empties the cache in the same step that installs the new
 * set, so a stale answer is never served. Policies that read `context.now` turn the cache off.
 *
 * cedar-wasm keeps pre-parsed sets in a map it never shrinks (it has no call to drop one), so each
 * engine owns two fixed slots per action and writes every new version into the slot the current
 * version is not using: the previous version is overwritten (and its memory freed) by the next
 * change, and an engine that is garbage collected hands its slots to the next engine.
 *
 * @since 0.1.0
 */
import { createRequire } from "node:module"
import type * as cedar from "@cedar-policy/cedar-wasm/nodejs"
import { type Clock, Effect, Either, Layer, Queue, Stream } from "effect"
import { InvalidArgument } from "../../domain/Errors.js"
import { type ApprovalRecord, isActiveGrant } from "../../domain/Records.js"
import {
  type Decision,
  PolicyEngine,
  type PolicyRequest,
  type Service as PolicyService
} from "../../ports/PolicyEngine.js"
import { type PolicyAdapter, policyAdapter } from "../../promise/Palyra.js"

/**
 * The Cedar schema of Palyra's entities and actions. `context.sandbox` is the sandbox tier of the
 * processes the tool starts (`"none"`, `"limits"` or `"os"`; `"none"` when the tool declares none);
 * `context.agent` is the id of the session's agent (`when { context.agent == "support" }`).
 *
 * @since 0.1.0
 * @category Schema
 */
export const schema = `namespace Palyra {
  entity Principal;
  entity Channel;
  entity Tool = { risk: String, category: String };
  type ToolContext = { session: String, channel: String, agent: String, argsDigest: String, now: Long, sandbox: String };
  action "tool.execute", "tool.request_approval" appliesTo {
    principal: [Principal],
    resource: [Tool],
    context: ToolContext
  };
}
`

/** The default policies: low-risk tools run, sensitive ones need approval, critical ones never run. @since 0.1.0 @category Policies */
export const defaultPolicies = `@id("default.low-risk-allowed")
@reason("low-risk tools are allowed")
permit (principal, action == Palyra::Action::"tool.execute", resource is Palyra::Tool)
when { resource.risk == "low" };

@id("default.sensitive-needs-approval")
@reason("sensitive tools need a human approval")
permit (principal, action == Palyra::Action::"tool.request_approval", resource is Palyra::Tool)
when { resource.risk == "sensitive" };

@id("default.critical-denied")
@reason("critical tools are denied")
forbid (principal, action, resource is Palyra::Tool)
when { resource.risk == "critical" };
`

/** A Cedar diagnostic, flattened. @since 0.1.0 @category Models */
export interface Diagnostic {
  readonly policyId?: string | undefined
  readonly message: string
  readonly help?: string | undefined
}

/** A policy set failed to parse or validate; the previous set (if any) stays in force. @since 0.1.0 @category Errors */
export const policyError = (diagnostics: ReadonlyArray<Diagnostic>) =>
  new InvalidArgument({
    message: `policy set rejected:\n${diagnostics.map((d) => `- ${d.policyId ? `${d.policyId}: ` : ""}${d.message}${d.help ? ` (${d.help})` : ""}`).join("\n")}`,
    field: "policies"
  })

const flatten = (errors: ReadonlyArray<cedar.DetailedError>, policyId?: string): Array<Diagnostic> =>
  errors.map((e) => ({ policyId, message: e.message, help: e.help ?? undefined }))

const ACTIONS = ["tool.execute", "tool.request_approval"] as const
type Action = (typeof ACTIONS)[number]

/**
 * cedar-wasm, loaded on first use: its CommonJS body reads and compiles a 4 MB wasm module (~20 ms
 * of a cold start's main thread), and an engine on the built-in policies needs it only at its first
 * decision (see `make`).
 */
let loaded: typeof cedar | undefined
// A failed load is kept: every later use rethrows it instead of reading and compiling 4 MB again.
let loadFailed: unknown
const CEDAR = "@cedar-policy/cedar-wasm/nodejs"
const requireHere = createRequire(import.meta.url)
const wasm = (): typeof cedar => {
  if (loaded !== undefined) return loaded
  if (loadFailed !== undefined) throw loadFailed
  try {
    loaded = requireHere(CEDAR) as typeof cedar
    return loaded
  } catch (e) {
    loadFailed = new Error(`cannot load Cedar (${CEDAR}): ${e instanceof Error ? e.message : String(e)}`, { cause: e })
    throw loadFailed
  }
}
/** Whether cedar-wasm resolves from here (a path lookup; nothing is loaded). */
const resolvable = (): Either.Either<void, InvalidArgument> => {
  if (loaded !== undefined) return Either.void
  try {
    requireHere.resolve(CEDAR)
    return Either.void
  } catch (e) {
    return Either.left(
      new InvalidArgument({ message: `cannot find Cedar (${CEDAR}): ${e instanceof Error ? e.message : String(e)}` })
    )
  }
}

/** Policy ids starting with this prefix name standing grants; policy files may not use it. */
const GRANT_ID_PREFIX = "grant:"

// ---------------------------------------------------------------------------------------------
// Policies in Cedar's JSON form
// ---------------------------------------------------------------------------------------------

/**
 * One policy: what the engine needs to know about it, read from its JSON form, and its text (Cedar
 * takes a policy set as text several times faster than as JSON).
 */
interface Policy {
  readonly id: string
  readonly text: string
  readonly reason: string | undefined
  /** The actions its scope can match. */
  readonly actions: ReadonlyArray<Action>
  /** Whether the policy reads `context.now` (then its answers depend on the time). */
  readonly readsNow: boolean
  /**
   * Whether it reads `context.argsDigest` / `context.session`: when no policy in force does, a
   * decision does not depend on them and the decision cache is keyed without them (a tool called
   * with new args is then a hit, not a Cedar call of ~150 µs).
   */
  readonly readsArgsDigest: boolean
  readonly readsSession: boolean
}

const contextVar = (expr: unknown): boolean =>
  typeof expr === "object" && expr !== null && (expr as { readonly Var?: unknown }).Var === "context"

/**
 * Whether a JSON expression may read `context.<attr>`: a `context.<attr>` access, or the context
 * record used whole (then any field could be read). `context has …` and other fields do not count.
 */
const readsContext =
  (attr: string) =>
  (node: unknown): boolean => {
    const reads = (n: unknown): boolean => {
      if (Array.isArray(n)) return n.some(reads)
      if (typeof n !== "object" || n === null) return false
      if (contextVar(n)) return true
      const record = n as Record<string, unknown>
      const access = record["."] as { readonly left?: unknown; readonly attr?: unknown } | undefined
      if (access !== undefined && contextVar(access.left)) return access.attr === attr
      const has = record.has as { readonly left?: unknown } | undefined
      if (has !== undefined && contextVar(has.left)) return false
      return Object.values(record).some(reads)
    }
    return reads(node)
  }
const readsNow = readsContext("now")
const readsArgsDigest = readsContext("argsDigest")
const readsSession = readsContext("session")

const uidOf = (uid: cedar.EntityUidJson): cedar.TypeAndId => ("__entity" in uid ? uid.__entity : uid)

/**
 * Whether a policy's action scope can match `action`. Palyra's schema has no action groups, so
 * `in` names actions one by one; a scope naming anything else is kept in both sets (validation has
 * already rejected unknown actions, and keeping a policy can never change a decision).
 */
const scopeMatches = (scope: cedar.ActionConstraint, action: Action): boolean => {
  if (scope.op === "All") return true
  const named = "entities" in scope ? scope.entities : "entity" in scope ? [scope.entity] : undefined
  if (named === undefined) return true // a template slot
  return named.some((uid) => {
    const { type, id } = uidOf(uid)
    return type !== "Palyra::Action" || id === action || !(ACTIONS as ReadonlyArray<string>).includes(id)
  })
}

/** What the engine needs to know about one policy, read from its JSON form. */
const describePolicy = (id: string, json: cedar.PolicyJson, text: string): Policy => {
  const reason = json.annotations?.reason
  return {
    id,
    text,
    reason: typeof reason === "string" && reason.length > 0 ? reason : undefined,
    actions: ACTIONS.filter((action) => scopeMatches(json.action, action)),
    readsNow: readsNow(json.conditions),
    readsArgsDigest: readsArgsDigest(json.conditions),
    readsSession: readsSession(json.conditions)
  }
}

/**
 * Split a Cedar policy text into its policies and read each one's JSON form: ids and reasons from
 * the annotations, the action scope, whether it reads the time. Rejects templates, empty or
 * duplicate ids and ids in the grant namespace.
 */
const parsePolicies = (text: string): Either.Either<ReadonlyArray<Policy>, InvalidArgument> => {
  const parts = wasm().policySetTextToParts(text)
  if (parts.type === "failure") return Either.left(policyError(flatten(parts.errors)))
  const diagnostics: Array<Diagnostic> = parts.policy_templates.map((t) => ({
    message: `templates (policies with ?principal or ?resource slots) are not supported: ${t.split("\n").find((l) => !l.startsWith("@")) ?? t}`
  }))
  // Cedar names the policies of a text policy0, policy1, … in order of appearance, and returns
  // them sorted by that name; the fallback id of a policy without `@id` is Cedar's own name.
  const cedarIds = parts.policies.map((_, i) => `policy${i}`).sort()
  const seen = new Set<string>()
  const policies: Array<Policy & { readonly position: number }> = []
  for (const [k, policyText] of parts.policies.entries()) {
    const cedarId = cedarIds[k]!
    const parsed = wasm().policyToJson(policyText)
    if (parsed.type === "failure") {
      diagnostics.push(...flatten(parsed.errors, cedarId))
      continue
    }
    const annotations: Record<string, string | null> = parsed.json.annotations ?? {}
    const explicit = annotations.id
    const id = explicit ?? cedarId
    const problem =
      "id" in annotations && (typeof explicit !== "string" || explicit.length === 0)
        ? "@id needs a non-empty value"
        : id.startsWith(GRANT_ID_PREFIX)
          ? `ids starting with "${GRANT_ID_PREFIX}" name standing grants`
          : seen.has(id)
            ? "two policies have this id"
            : undefined
    if (problem !== undefined) {
      diagnostics.push({ policyId: explicit || cedarId, message: problem })
      continue
    }
    seen.add(id)
    policies.push({
      ...describePolicy(id, parsed.json, policyText),
      position: Number(cedarId.slice("policy".length))
    })
  }
  if (diagnostics.length > 0) return Either.left(policyError(diagnostics))
  return Either.right(policies.sort((a, b) => a.position - b.position))
}

/**
 * The built-in policies as `parsePolicies(defaultPolicies)` reads them, written out: a start on the
 * built-ins skips Cedar's split and JSON conversion (the wasm functions they touch are compiled on
 * first use: ~20-30 ms of a cold start). Test "the built-in policies written out are what Cedar
 * reads" keeps the two equal.
 */
const builtinPolicies = (): ReadonlyArray<Policy> => {
  const [low = "", sensitive = "", critical = ""] = defaultPolicies.trim().split("\n\n")
  const policy = (id: string, text: string, reason: string, actions: ReadonlyArray<Action>): Policy => ({
    id,
    text,
    reason,
    actions,
    readsNow: false,
    readsArgsDigest: false,
    readsSession: false
  })
  return [
    policy("default.low-risk-allowed", low, "low-risk tools are allowed", ["tool.execute"]),
    policy("default.sensitive-needs-approval", sensitive, "sensitive tools need a human approval", [
      "tool.request_approval"
    ]),
    policy("default.critical-denied", critical, "critical tools are denied", ACTIONS)
  ]
}

/** The policies of a text as the engine reads them (Cedar's parser, or the built-ins written out). @internal */
export const readPolicies = (text: string, viaCedar = false): Either.Either<ReadonlyArray<Policy>, InvalidArgument> =>
  text === defaultPolicies && !viaCedar ? Either.right(builtinPolicies()) : parsePolicies(text)

const contextAttr = (attr: string): cedar.Expr => ({ ".": { left: { Var: "context" }, attr } })

/** A standing grant as a Cedar policy in JSON form (no text is rendered or parsed). */
const grantJson = (grant: ApprovalRecord): cedar.PolicyJson => {
  const conditions: Array<cedar.Expr> = [
    grant.scope === "session"
      ? { "==": { left: contextAttr("session"), right: { Value: grant.sessionId } } }
      : { "==": { left: contextAttr("argsDigest"), right: { Value: grant.argsDigest } } }
  ]
  if (grant.grantExpiresAt !== null) {
    conditions.push({ "<": { left: contextAttr("now"), right: { Value: Math.floor(grant.grantExpiresAt) } } })
  }
  return {
    effect: "permit",
    principal: { op: "==", entity: { type: "Palyra::Principal", id: grant.principal } },
    action: { op: "==", entity: { type: "Palyra::Action", id: "tool.execute" } },
    resource: { op: "==", entity: { type: "Palyra::Tool", id: grant.tool } },
    conditions: [{ kind: "when", body: conditions.reduce((left, right) => ({ "&&": { left, right } })) }],
    annotations: {
      id: `${GRANT_ID_PREFIX}${grant.id}`,
      reason: `${grant.scope}-scope approval by ${grant.resolver ?? "?"}`
    }
  }
}

/** Cedar's text of a JSON policy built by this module (a failure is a defect here). */
const textOf = (json: cedar.PolicyJson): string => {
  const text = wasm().policyToText(json)
  if (text.type === "failure") throw new Error(`Cedar cannot print a grant policy: ${text.errors[0]?.message}`)
  return text.text
}

/**
 * Palyra's own schema is checked once per process, on the first validation, not at start: parsing
 * it makes V8 compile the Cedar wasm functions that read schemas (~100-250 ms of a cold start), and
 * a daemon on the built-in policies validates nothing at start (test "the built-in schema and
 * policies are valid" checks them).
 */
let schemaChecked = false

/** Validate policies against the schema (each policy is checked on its own). */
const validate = (policies: ReadonlyArray<Policy>): Either.Either<void, InvalidArgument> => {
  if (policies.length === 0) return Either.void
  if (!schemaChecked) {
    if (wasm().checkParseSchema(schema).type === "failure") throw new Error("Palyra's Cedar schema is invalid")
    schemaChecked = true
  }
  const validation = wasm().validate({
    schema,
    policies: { staticPolicies: Object.fromEntries(policies.map((p) => [p.id, p.text])) },
    validationSettings: { mode: "strict" }
  })
  if (validation.type === "failure") return Either.left(policyError(flatten(validation.errors)))
  if (validation.validationErrors.length > 0) {
    return Either.left(policyError(validation.validationErrors.flatMap((e) => flatten([e.error], e.policyId))))
  }
  return Either.void
}

/**
 * The Cedar policy a standing grant amounts to: a `permit` on `tool.execute` for one principal and
 * one tool, narrowed to the exact arguments (`always`) or to one session (`session`), rendered by
 * Cedar from the very JSON policy the engine evaluates.
 *
 * @since 0.1.0
 * @category Grants
 */
export const grantPolicy = (grant: ApprovalRecord): string => {
  const text = wasm().policyToText(grantJson(grant))
  if (text.type === "failure") return JSON.stringify(grantJson(grant))
  const formatted = wasm().formatPolicies({ policyText: text.text })
  return formatted.type === "success" ? formatted.formatted_policy.trimEnd() : text.text
}

// ---------------------------------------------------------------------------------------------
// Pre-parsed sets: fixed slots, reused
// ---------------------------------------------------------------------------------------------

/** Every pre-parsed set id this module has registered with cedar-wasm (its map never shrinks). */
const registered = new Set<string>()
/** Slot prefixes of engines that were garbage collected, ready for the next engine. */
const freePrefixes: Array<string> = []
let prefixes = 0

type Slot = 0 | 1
const setId = (prefix: string, slot: Slot, action: Action) => `palyra/${prefix}/${slot}/${action}`

const prepare = (id: string, policies: Record<string, cedar.Policy>): cedar.CheckParseAnswer => {
  const answer = wasm().preparsePolicySet(id, { staticPolicies: policies })
  if (answer.type === "success") registered.add(id)
  return answer
}

/** Empty an engine's slots (freeing its sets' memory) and offer them to the next engine. */
const releasePrefix = (prefix: string) => {
  for (const slot of [0, 1] as const) {
    for (const action of ACTIONS) {
      const id = setId(prefix, slot, action)
      if (registered.has(id)) prepare(id, {})
    }
  }
  freePrefixes.push(prefix)
}

const collected = new FinalizationRegistry<string>(releasePrefix)

/**
 * How many pre-parsed policy sets the Cedar engines of this process hold in cedar-wasm: two per
 * action for each live engine (the version in force and the one before it), whatever the number of
 * reloads and grant changes.
 *
 * @since 0.1.0
 * @category Diagnostics
 */
export const preparedSetCount = (): number => registered.size

// ---------------------------------------------------------------------------------------------
// The engine
// ---------------------------------------------------------------------------------------------

/** @since 0.1.0 @category Models */
export interface CedarEngine extends PolicyService {
  /** Replace the base policies (Cedar text). Fails with the diagnostics and keeps the old set when invalid. */
  readonly reload: (policies: string) => Effect.Effect<number, InvalidArgument>
  /** The current policy-set version (bumps on every reload or grant change). */
  readonly version: Effect.Effect<number>
  /** The full policy text in force: base policies plus grants. */
  readonly policyText: Effect.Effect<string>
  /** Evaluate these standing grants (the active ones) as policies, from now on. */
  readonly setGrants: (grants: ReadonlyArray<ApprovalRecord>) => Effect.Effect<void>
  /** A standing grant as the Cedar policy this engine evaluates for it. */
  readonly describeGrant: (grant: ApprovalRecord) => string
}

/** @since 0.1.0 @category Models */
export interface Options {
  /** Cedar policy text (default: `defaultPolicies`). */
  readonly policies?: string | undefined
  /** Largest number of cached decisions (default 10,000; 0 disables the cache). */
  readonly cacheSize?: number | undefined
}

interface Compiled {
  readonly version: number
  readonly slot: Slot
  readonly reasons: ReadonlyMap<string, string>
  readonly timeSensitive: boolean
  /** Whether any policy in force reads `context.argsDigest` / `context.session` (else the cache key leaves them out). */
  readonly keyArgsDigest: boolean
  readonly keySession: boolean
}

interface Answer {
  readonly allowed: boolean
  readonly policyIds: ReadonlyArray<string>
  readonly errors: ReadonlyArray<string>
}

/**
 * Build the engine. Fails at start-up with Cedar's diagnostics when the policies are invalid.
 *
 * An engine on the built-in policies (no `policies`, or `defaultPolicies`), which need no
 * validation, installs them with Cedar on its first use instead (a decision, a non-empty set of
 * grants, a reload, `version`): building it loads nothing, so a daemon on the built-ins does not
 * load cedar-wasm before its first tool call. Setting an empty set of grants before that first use
 * installs nothing (there is nothing to evaluate) and does not bump the version.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = (options: Options = {}): Effect.Effect<CedarEngine, InvalidArgument> =>
  Effect.suspend(() => {
    const initialText = options.policies ?? defaultPolicies
    const initial = readPolicies(initialText)
    if (Either.isLeft(initial)) return Effect.fail(initial.left)
    const prefix = freePrefixes.pop() ?? String(++prefixes)
    const cacheSize = options.cacheSize ?? 10_000

    // All mutable state lives here; every method closes over it, so the engine is collectable (and
    // its slots reusable) only once nothing can decide with it any more.
    const state = {
      current: undefined as Compiled | undefined,
      baseText: initialText,
      base: initial.right,
      grants: [] as ReadonlyArray<ApprovalRecord>,
      /** The grants' policies in force, by their JSON (a grant that did not change is not rebuilt). */
      grantPolicies: new Map<string, Policy>(),
      cache: new Map<string, Decision>()
    }

    /**
     * Validate the policies not validated yet, pre-parse the set per action into the slot the
     * current version is not using, and make it current. Synchronous from start to end, so no
     * decision can run between writing a slot and switching to it; on failure nothing changes.
     */
    const install = (
      base: ReadonlyArray<Policy>,
      grants: ReadonlyArray<Policy>,
      unvalidated: ReadonlyArray<Policy>
    ): Either.Either<Compiled, InvalidArgument> => {
      const checked = validate(unvalidated)
      if (Either.isLeft(checked)) return Either.left(checked.left)
      const policies = [...base, ...grants]
      const slot: Slot = state.current?.slot === 0 ? 1 : 0
      // One pre-parsed set per action: a policy whose scope cannot match an action is left out of
      // that action's set, so each call evaluates only the policies that can apply to it.
      for (const action of ACTIONS) {
        const subset = policies.filter((p) => p.actions.includes(action))
        const prepared = prepare(setId(prefix, slot, action), Object.fromEntries(subset.map((p) => [p.id, p.text])))
        if (prepared.type === "failure") return Either.left(policyError(flatten(prepared.errors)))
      }
      const compiled: Compiled = {
        version: (state.current?.version ?? 0) + 1,
        slot,
        reasons: new Map(policies.flatMap((p) => (p.reason === undefined ? [] : [[p.id, p.reason] as const]))),
        timeSensitive: policies.some((p) => p.readsNow),
        keyArgsDigest: policies.some((p) => p.readsArgsDigest),
        keySession: policies.some((p) => p.readsSession)
      }
      state.current = compiled
      state.cache.clear()
      return Either.right(compiled)
    }

    const ask = (compiled: Compiled, action: Action, request: PolicyRequest, now: number): Answer => {
      const answer = wasm().statefulIsAuthorized({
        principal: { type: "Palyra::Principal", id: request.principal },
        action: { type: "Palyra::Action", id: action },
        resource: { type: "Palyra::Tool", id: request.tool.name },
        context: {
          session: request.sessionId,
          channel: request.channel ?? "",
          agent: request.agent ?? "default",
          argsDigest: request.argsDigest ?? "",
          now,
          sandbox: request.tool.sandbox ?? "none"
        },
        preparsedPolicySetId: setId(prefix, compiled.slot, action),
        entities: [
          // The smallest entity slice: only the tool has attributes policies read.
          {
            uid: { type: "Palyra::Tool", id: request.tool.name },
            attrs: { risk: request.tool.risk, category: request.tool.category },
            parents: []
          }
        ]
      })
      if (answer.type === "failure") {
        return { allowed: false, policyIds: [], errors: answer.errors.map((e) => e.message) }
      }
      return {
        allowed: answer.response.decision === "allow",
        policyIds: [...answer.response.diagnostics.reason].sort(),
        errors: answer.response.diagnostics.errors.map((e) => `${e.policyId}: ${e.error.message}`)
      }
    }

    const explain = (compiled: Compiled, decision: Decision["decision"], answer: Answer): Decision => ({
      decision,
      policyIds: answer.policyIds,
      reasons: [
        ...answer.policyIds.map((id) => compiled.reasons.get(id) ?? id),
        ...answer.errors.map((e) => `policy error (treated as not applying): ${e}`)
      ]
    })

    const evaluate = (compiled: Compiled, request: PolicyRequest, now: number): Decision => {
      const exec = ask(compiled, "tool.execute", request, now)
      if (exec.allowed) return explain(compiled, "allow", exec)
      if (exec.policyIds.length > 0) return explain(compiled, "deny", exec) // a forbid decided
      const approval = ask(compiled, "tool.request_approval", request, now)
      if (approval.allowed) return explain(compiled, "require_approval", approval)
      if (approval.policyIds.length > 0) return explain(compiled, "deny", approval)
      return {
        decision: "deny",
        policyIds: [],
        reasons: [`no policy permits ${request.tool.name} (deny by default)`, ...exec.errors, ...approval.errors]
      }
    }

    // Reads the version in force and asks Cedar in one synchronous step: a reload cannot overwrite
    // the slot in between. The cache is emptied by every install, so its key needs no version.
    const decideNow = (request: PolicyRequest, clock: Clock.Clock): Decision => {
      const compiled = current()
      if (cacheSize === 0 || compiled.timeSensitive) return evaluate(compiled, request, clock.unsafeCurrentTimeMillis())
      // A context field no policy reads cannot change the decision: it is left out of the key.
      const session = compiled.keySession ? request.sessionId : ""
      const argsDigest = compiled.keyArgsDigest ? (request.argsDigest ?? "") : ""
      const key = `${request.principal}\u0000${request.tool.name}\u0000${request.tool.risk}\u0000${request.tool.category}\u0000${session}\u0000${request.channel ?? ""}\u0000${argsDigest}\u0000${request.tool.sandbox ?? "none"}\u0000${request.agent ?? "default"}`
      const hit = state.cache.get(key)
      if (hit) return hit
      const decision = evaluate(compiled, request, clock.unsafeCurrentTimeMillis())
      if (state.cache.size >= cacheSize) state.cache.delete(state.cache.keys().next().value!)
      state.cache.set(key, decision)
      return decision
    }

    // The built-in policies are validated by a test, not at every start (see `schemaChecked`), and
    // installed on the engine's first use (see above); other policies are validated and installed
    // now, so invalid ones fail the start.
    const current = (): Compiled => {
      if (state.current !== undefined) return state.current
      const installed = install(state.base, [], [])
      if (Either.isLeft(installed)) throw new Error(`Cedar rejected the built-in policies: ${installed.left.message}`)
      return installed.right
    }
    // Deferred or not, a missing cedar-wasm fails the start (a path lookup: nothing is loaded).
    const first = Either.flatMap(resolvable(), () =>
      initialText === defaultPolicies ? Either.void : Either.map(install(state.base, [], state.base), () => undefined)
    )
    if (Either.isLeft(first)) {
      releasePrefix(prefix)
      return Effect.fail(first.left)
    }
    collected.register(state, prefix)

    const engine: CedarEngine = {
      decide: (request) => Effect.clockWith((clock) => Effect.sync(() => decideNow(request, clock))),
      setGrants: (next) =>
        Effect.clockWith((clock) =>
          Effect.suspend(() => {
            const now = clock.unsafeCurrentTimeMillis()
            const active = next.filter((g) => isActiveGrant(g, now))
            // Not installed yet and nothing to add: the first use installs the base alone anyway.
            if (state.current === undefined && active.length === 0) return Effect.void
            current()
            const grantPolicies = new Map<string, Policy>()
            const fresh: Array<Policy> = []
            for (const grant of active) {
              const json = grantJson(grant)
              const key = JSON.stringify(json)
              const known = state.grantPolicies.get(key)
              const policy = known ?? describePolicy(`${GRANT_ID_PREFIX}${grant.id}`, json, textOf(json))
              if (known === undefined) fresh.push(policy)
              grantPolicies.set(key, policy)
            }
            return Either.map(install(state.base, [...grantPolicies.values()], fresh), () => {
              state.grants = active
              state.grantPolicies = grantPolicies
            })
          })
        ).pipe(Effect.orDie),
      reload: (policies) =>
        Effect.suspend(() => {
          // The built-ins first, if not yet: versions count from them. A Cedar that cannot load is
          // the reload's failure (a policy watcher logs it and keeps watching), not a defect.
          try {
            current()
          } catch (e) {
            return Either.left(new InvalidArgument({ message: e instanceof Error ? e.message : String(e) }))
          }
          return Either.flatMap(parsePolicies(policies), (base) =>
            Either.map(install(base, [...state.grantPolicies.values()], base), (compiled) => {
              state.base = base
              state.baseText = policies
              return compiled.version
            })
          )
        }),
      version: Effect.sync(() => current().version),
      policyText: Effect.sync(() => [state.baseText, ...state.grants.map(grantPolicy)].join("\n\n")),
      describeGrant: grantPolicy
    }
    return Effect.succeed(engine)
  })

/** @since 0.1.0 @category Layers */
export const layer = (options: Options = {}): Layer.Layer<PolicyEngine, InvalidArgument> =>
  Layer.effect(PolicyEngine, make(options))

/**
 * The Cedar engine as a value for the Promise API:
 * `createPalyra({ model, policy: CedarPolicy.adapter({ policies }) })`. Invalid policies make every
 * call of that instance fail with `InvalidArgument` and Cedar's diagnostics.
 *
 * @since 0.1.0
 * @category Adapters
 */
export const adapter = (options: Options = {}): PolicyAdapter => policyAdapter(layer(options))

/**
 * Read every `*.cedar` file of a folder (sorted by name) into one policy text.
 *
 * @since 0.1.0
 * @category Files
 */
export const readPolicyDirectory = (dir: string): Effect.Effect<string, InvalidArgument> =>
  Effect.tryPromise({
    try: async () => {
      const { readdir, readFile } = await import("node:fs/promises")
      const names = (await readdir(dir)).filter((n) => n.endsWith(".cedar")).sort()
      const texts = await Promise.all(names.map((n) => readFile(`${dir}/${n}`, "utf8")))
      return texts.join("\n\n")
    },
    catch: (cause) =>
      new InvalidArgument({ message: `cannot read policies from ${dir}: ${String(cause)}`, field: "policies" })
  })

/**
 * Reload the engine whenever a `*.cedar` file in `dir` changes (changes within 50 ms count as one),
 * until the scope closes. A bad file keeps the old set in force; Cedar's diagnostics go to the log
 * (and to `onResult`). Reloads run in a fiber forked from the caller, so they log through the
 * caller's logger and log level.
 *
 * @since 0.1.0
 * @category Files
 */
export const watchDirectory = (
  engine: CedarEngine,
  dir: string,
  onResult: (
    result: { readonly ok: true; readonly version: number } | { readonly ok: false; readonly error: InvalidArgument }
  ) => void = () => {}
) =>
  Effect.gen(function* () {
    const { watch } = yield* Effect.promise(() => import("node:fs"))
    const changes = yield* Queue.sliding<"changed" | Error>(64)
    const reload = Effect.flatMap(readPolicyDirectory(dir), engine.reload).pipe(
      Effect.tap((version) => Effect.logInfo("policies reloaded", { dir, version })),
      Effect.tapError((error) =>
        Effect.logError("policy reload rejected; the previous policies stay in force", error.message)
      ),
      Effect.match({
        onSuccess: (version) => onResult({ ok: true, version }),
        onFailure: (error) => onResult({ ok: false, error })
      })
    )
    // The watcher is in place before this returns, so no change after the call is missed.
    yield* Effect.acquireRelease(
      Effect.sync(() => {
        const watcher = watch(dir, (_event, name) => {
          if (name === null || String(name).endsWith(".cedar")) Queue.unsafeOffer(changes, "changed")
        })
        watcher.on("error", (error) => Queue.unsafeOffer(changes, error))
        return watcher
      }),
      (watcher) => Effect.sync(() => watcher.close())
    )
    yield* Stream.fromQueue(changes).pipe(
      Stream.tap((change) =>
        change instanceof Error
          ? Effect.logWarning("watching the policy folder failed", { dir, error: change.message })
          : Effect.void
      ),
      Stream.filter((change) => change === "changed"),
      Stream.debounce("50 millis"),
      Stream.runForEach(() => reload),
      Effect.forkScoped
    )
  })
