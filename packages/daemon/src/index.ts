/**
 * `@palyra/daemon`: the `palyrad` daemon and the `palyra` CLI. Embedders can reuse the pieces:
 * `Config.load`, `Main.run` (the whole assembly), `Cli.main`, `Doctor.run` (the installation
 * checks) and `Init.render` / `Init.write` (a commented `palyra.toml`).
 *
 * @since 0.1.0
 */
export * as Cli from "./Cli.js"
export * as Config from "./Config.js"
export * as Doctor from "./Doctor.js"
export * as Init from "./Init.js"
export * as Main from "./Main.js"
export * as VerifyOffline from "./VerifyOffline.js"
