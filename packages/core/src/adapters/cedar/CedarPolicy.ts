/**
 * The Cedar policy engine (`@cedar-policy/cedar-wasm`).
 *
 * Entities: `Palyra::Principal`, `Palyra::Tool` (attributes `risk`, `category`), actions
 * `Palyra::Action::"tool.execute"` and `"tool.request_approval"`; the context carries the session,
 * channel, a digest of the arguments and the time. The decision rule is the one every Palyra engine
 * follows (see `PolicyEngine`), and every decision names the policies that made it: a policy's
 * `@id("…")` annotation (or its position) and its `@reason("…")`.
 *
 * Policies are validated against the schema and pre-parsed once per version; a reload that fails
 * keeps the old set in force and returns Cedar's diagnostics. Standing approval grants become
 * narrow `permit` policies in the same set. Decisions are cached exactly, keyed by the policy-set
 * version and the whole request, so a policy or grant change can never serve a stale answer.
 *
 * @since 0.1.0
 */
import * as cedar from "@cedar-policy/cedar-wasm/nodejs"
import { Clock, Effect, Layer, Ref } from "effect"
import { InvalidArgument } from "../../domain/Errors.js"
import { type ApprovalRecord, isActiveGrant } from "../../domain/Records.js"
import {
  type Decision,
  PolicyEngine,
  type PolicyRequest,
  type Service as PolicyService
} from "../../ports/PolicyEngine.js"

/**
 * The Cedar schema of Palyra's entities and actions. `context.sandbox` is the sandbox tier of the
 * processes the tool starts (`"none"`, `"limits"` or `"os"`; `"none"` when the tool declares none).
 *
 * @since 0.1.0
 * @category Schema
 */
export const schema = `namespace Palyra {
  entity Principal;
  entity Channel;
  entity Tool = { risk: String, category: String };
  type ToolContext = { session: String, channel: String, argsDigest: String, now: Long, sandbox: String };
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

const quote = (s: string) => JSON.stringify(s)

/**
 * The Cedar policy a standing grant amounts to: a `permit` on `tool.execute` for one principal and
 * one tool, narrowed to the exact arguments (`always`) or to one session (`session`).
 *
 * @since 0.1.0
 * @category Grants
 */
export const grantPolicy = (grant: ApprovalRecord): string => {
  const conditions =
    grant.scope === "session"
      ? [`context.session == ${quote(grant.sessionId)}`]
      : [`context.argsDigest == ${quote(grant.argsDigest)}`]
  if (grant.grantExpiresAt !== null) conditions.push(`context.now < ${Math.floor(grant.grantExpiresAt)}`)
  return `@id(${quote(`grant:${grant.id}`)})
@reason(${quote(`${grant.scope}-scope approval by ${grant.resolver ?? "?"}`)})
permit (
  principal == Palyra::Principal::${quote(grant.principal)},
  action == Palyra::Action::"tool.execute",
  resource == Palyra::Tool::${quote(grant.tool)}
)
when { ${conditions.join(" && ")} };`
}

/** The head of a policy (its effect and scope), without annotations and conditions. */
const scopeOf = (policy: string) => {
  const body = policy.replace(/@\w+\([^)]*\)/g, "")
  const open = body.indexOf("(")
  const close = body.indexOf(")", open)
  return open >= 0 && close > open ? body.slice(open, close) : body
}

interface Compiled {
  readonly version: number
  readonly id: string
  readonly reasons: ReadonlyMap<string, string>
  readonly timeSensitive: boolean
}

const flatten = (errors: ReadonlyArray<cedar.DetailedError>, policyId?: string): Array<Diagnostic> =>
  errors.map((e) => ({ policyId, message: e.message, help: e.help ?? undefined }))

let instance = 0

/** @since 0.1.0 @category Models */
export interface CedarEngine extends PolicyService {
  /** Replace the base policies (Cedar text). Fails with the diagnostics and keeps the old set when invalid. */
  readonly reload: (policies: string) => Effect.Effect<number, InvalidArgument>
  /** The current policy-set version (bumps on every reload or grant change). */
  readonly version: Effect.Effect<number>
  /** The full policy text in force: base policies plus grants. */
  readonly policyText: Effect.Effect<string>
}

/** @since 0.1.0 @category Models */
export interface Options {
  /** Cedar policy text (default: `defaultPolicies`). */
  readonly policies?: string | undefined
  /** Largest number of cached decisions (default 10,000; 0 disables the cache). */
  readonly cacheSize?: number | undefined
}

/**
 * Build the engine. Fails at start-up with Cedar's diagnostics when the policies are invalid.
 *
 * @since 0.1.0
 * @category Constructors
 */
export const make = (options: Options = {}): Effect.Effect<CedarEngine, InvalidArgument> =>
  Effect.gen(function* () {
    const prefix = `palyra-${++instance}`
    const schemaName = `${prefix}-schema`
    const schemaAnswer = cedar.preparseSchema(schemaName, schema)
    if (schemaAnswer.type === "failure") return yield* Effect.die(new Error(`Palyra's Cedar schema is invalid`))
    const cacheSize = options.cacheSize ?? 10_000
    const cache = new Map<string, Decision>()
    let base = options.policies ?? defaultPolicies
    let grants: ReadonlyArray<ApprovalRecord> = []
    let version = 0

    const compile = (text: string): Effect.Effect<Compiled, InvalidArgument> =>
      Effect.suspend(() => {
        const parts = cedar.policySetTextToParts(text)
        if (parts.type === "failure") return Effect.fail(policyError(flatten(parts.errors)))
        const staticPolicies: Record<string, string> = {}
        const reasons = new Map<string, string>()
        parts.policies.forEach((policy, i) => {
          const id = /@id\(\s*"([^"]+)"\s*\)/.exec(policy)?.[1] ?? `policy${i}`
          const reason = /@reason\(\s*"([^"]*)"\s*\)/.exec(policy)?.[1]
          staticPolicies[id] = policy
          if (reason) reasons.set(id, reason)
        })
        const validation = cedar.validate({
          schema,
          policies: { staticPolicies },
          validationSettings: { mode: "strict" }
        })
        if (validation.type === "failure") return Effect.fail(policyError(flatten(validation.errors)))
        if (validation.validationErrors.length > 0) {
          return Effect.fail(policyError(validation.validationErrors.flatMap((e) => flatten([e.error], e.policyId))))
        }
        const next = version + 1
        const id = `${prefix}-v${next}`
        // Two pre-parsed sets, one per action: a policy whose scope names one action only goes into
        // that action's set, so each call evaluates only the policies that can apply to it.
        const forAction = (action: "tool.execute" | "tool.request_approval") => {
          const other = action === "tool.execute" ? "tool.request_approval" : "tool.execute"
          const only = new RegExp(`action\\s*==\\s*Palyra::Action::"${other.replace(".", "\\.")}"`)
          return Object.fromEntries(Object.entries(staticPolicies).filter(([, text]) => !only.test(scopeOf(text))))
        }
        for (const action of ["tool.execute", "tool.request_approval"] as const) {
          const prepared = cedar.preparsePolicySet(`${id}:${action}`, { staticPolicies: forAction(action) })
          if (prepared.type === "failure") return Effect.fail(policyError(flatten(prepared.errors)))
        }
        version = next
        cache.clear()
        return Effect.succeed({ version: next, id, reasons, timeSensitive: /context\.now/.test(text) })
      })

    const fullText = () => [base, ...grants.map(grantPolicy)].join("\n\n")
    const current = yield* Ref.make(yield* compile(fullText()))

    const ask = (
      compiled: Compiled,
      action: "tool.execute" | "tool.request_approval",
      request: PolicyRequest,
      now: number
    ) => {
      const answer = cedar.statefulIsAuthorized({
        principal: { type: "Palyra::Principal", id: request.principal },
        action: { type: "Palyra::Action", id: action },
        resource: { type: "Palyra::Tool", id: request.tool.name },
        context: {
          session: request.sessionId,
          channel: request.channel ?? "",
          argsDigest: request.argsDigest ?? "",
          now,
          sandbox: request.tool.sandbox ?? "none"
        },
        preparsedPolicySetId: `${compiled.id}:${action}`,
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
        return { decision: "deny" as const, reason: [] as Array<string>, errors: answer.errors.map((e) => e.message) }
      }
      return {
        decision: answer.response.decision,
        reason: answer.response.diagnostics.reason,
        errors: answer.response.diagnostics.errors.map((e) => `${e.policyId}: ${e.error.message}`)
      }
    }

    const explain = (
      compiled: Compiled,
      decision: Decision["decision"],
      ids: ReadonlyArray<string>,
      errors: Array<string>
    ): Decision => ({
      decision,
      policyIds: [...ids],
      reasons: [
        ...ids.map((id) => compiled.reasons.get(id) ?? id),
        ...errors.map((e) => `policy error (treated as not applying): ${e}`)
      ]
    })

    const decideNow = (compiled: Compiled, request: PolicyRequest, now: number): Decision => {
      const exec = ask(compiled, "tool.execute", request, now)
      if (exec.decision === "allow") return explain(compiled, "allow", exec.reason, exec.errors)
      if (exec.reason.length > 0) return explain(compiled, "deny", exec.reason, exec.errors) // a forbid decided
      const approval = ask(compiled, "tool.request_approval", request, now)
      if (approval.decision === "allow") return explain(compiled, "require_approval", approval.reason, approval.errors)
      if (approval.reason.length > 0) return explain(compiled, "deny", approval.reason, approval.errors)
      return {
        decision: "deny",
        policyIds: [],
        reasons: [`no policy permits ${request.tool.name} (deny by default)`, ...exec.errors, ...approval.errors]
      }
    }

    const engine: CedarEngine = {
      decide: (request) =>
        Effect.gen(function* () {
          const compiled = yield* Ref.get(current)
          const now = yield* Clock.currentTimeMillis
          if (cacheSize === 0 || compiled.timeSensitive) return decideNow(compiled, request, now)
          const key = `${compiled.version}\u0000${request.principal}\u0000${request.tool.name}\u0000${request.tool.risk}\u0000${request.tool.category}\u0000${request.sessionId}\u0000${request.channel ?? ""}\u0000${request.argsDigest ?? ""}\u0000${request.tool.sandbox ?? "none"}`
          const hit = cache.get(key)
          if (hit) return hit
          const decision = decideNow(compiled, request, now)
          if (cache.size >= cacheSize) cache.delete(cache.keys().next().value!)
          cache.set(key, decision)
          return decision
        }),
      setGrants: (next) =>
        Effect.gen(function* () {
          const previous = grants
          const now = yield* Clock.currentTimeMillis
          grants = next.filter((g) => isActiveGrant(g, now))
          const compiled = yield* compile(fullText()).pipe(
            Effect.tapError(() =>
              Effect.sync(() => {
                grants = previous
              })
            )
          )
          yield* Ref.set(current, compiled)
        }).pipe(Effect.orDie),
      reload: (policies) =>
        Effect.gen(function* () {
          const previous = base
          base = policies
          const compiled = yield* compile(fullText()).pipe(
            Effect.tapError(() =>
              Effect.sync(() => {
                base = previous
              })
            )
          )
          yield* Ref.set(current, compiled)
          return compiled.version
        }),
      version: Effect.map(Ref.get(current), (c) => c.version),
      policyText: Effect.sync(fullText)
    }
    return engine
  })

/** @since 0.1.0 @category Layers */
export const layer = (options: Options = {}): Layer.Layer<PolicyEngine, InvalidArgument> =>
  Layer.effect(PolicyEngine, make(options))

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
 * Reload the engine whenever a `*.cedar` file in `dir` changes, until the scope closes. A bad file
 * keeps the old set in force; Cedar's diagnostics go to the log (and to `onResult`).
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
    const runtime = yield* Effect.runtime<never>()
    let timer: NodeJS.Timeout | undefined
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
    const watcher = yield* Effect.acquireRelease(
      Effect.sync(() =>
        watch(dir, (_event, name) => {
          if (name !== null && !String(name).endsWith(".cedar")) return
          clearTimeout(timer)
          timer = setTimeout(() => {
            void Effect.runPromise(Effect.provide(reload, runtime.context))
          }, 50)
        })
      ),
      (w) =>
        Effect.sync(() => {
          clearTimeout(timer)
          w.close()
        })
    )
    return watcher
  })
