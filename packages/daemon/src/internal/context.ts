import type { Journal, PolicyEngine, PromptAssembler } from "@palyra/core"
import { References } from "@palyra/core/context"
import type { Layer } from "effect"
import type { Config } from "../Config.js"

/**
 * The `[context]` extras around the context engine's layer: context references (on by default,
 * confined to the workspace, `@url:` under the `[http_fetch]` rules and policy).
 * @internal
 */
export const withReferences = <ROut, E, RIn>(
  config: Config,
  policy: PolicyEngine.Service,
  modelName: string,
  inner: Layer.Layer<ROut | PromptAssembler.PromptAssembler, E, RIn>
): Layer.Layer<ROut | PromptAssembler.PromptAssembler, E, RIn | Journal.Journal> =>
  config.context.references
    ? References.layer(inner, {
        workspace: config.workspaceDir,
        policy,
        http: {
          allowHosts: config.http_fetch.allow_hosts,
          allowPrivateNetworks: config.http_fetch.allow_private_networks
        },
        limits: config.context.reference_limits,
        modelName
      })
    : inner
