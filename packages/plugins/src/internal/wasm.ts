/**
 * The global `WebAssembly` object, typed: the repository compiles without the DOM library, which
 * is where TypeScript declares it (Node has it at run time).
 *
 * @internal
 */

/** @internal */
export interface ModuleDescriptor {
  readonly module?: string
  readonly name: string
  readonly kind: "function" | "table" | "memory" | "global" | "tag"
}

/** @internal */
export interface WasmModule {
  readonly __wasmModule?: never
}

interface Api {
  readonly validate: (bytes: Uint8Array) => boolean
  readonly compile: (bytes: Uint8Array) => Promise<WasmModule>
  readonly Module: {
    readonly imports: (module: WasmModule) => ReadonlyArray<Required<ModuleDescriptor>>
    readonly exports: (module: WasmModule) => ReadonlyArray<ModuleDescriptor>
  }
}

/** @internal */
export const wasm = (globalThis as unknown as { readonly WebAssembly: Api }).WebAssembly
