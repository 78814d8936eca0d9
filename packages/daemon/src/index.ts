/**
 * `@palyra/daemon`: the `palyrad` daemon and the `palyra` CLI. Embedders can reuse the pieces:
 * `Config.load`, `Main.run` (the whole assembly) and `Cli.main`.
 *
 * @since 0.1.0
 */
export * as Cli from "./Cli.js"
export * as Config from "./Config.js"
export * as Main from "./Main.js"
export * as VerifyOffline from "./VerifyOffline.js"
