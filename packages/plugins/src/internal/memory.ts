/**
 * A ceiling on a module's own linear memory, set in the binary before it is compiled: the memory
 * section's limits get a maximum of at most `maxPages`, so `memory.grow` past it returns -1 (and a
 * language runtime traps on it) instead of taking the host's memory. Engines enforce a declared
 * maximum; there is no other way to cap a memory the module defines itself.
 *
 * Only what this needs is parsed: the section headers, and the memory section's limits (LEB128).
 * The result is checked by `WebAssembly.validate` and compiled by the caller.
 *
 * @internal
 */
import { wasm } from "./wasm.js"

const MEMORY_SECTION = 5

/** An unsigned LEB128 number at `offset`: its value and the offset after it. */
const readU32 = (bytes: Uint8Array, offset: number): { value: number; next: number } => {
  let value = 0
  let shift = 0
  for (let i = offset; i < bytes.length && i < offset + 5; i++) {
    const byte = bytes[i]!
    value += (byte & 0x7f) * 2 ** shift
    shift += 7
    if ((byte & 0x80) === 0) return { value, next: i + 1 }
  }
  throw new Error(`malformed LEB128 number at byte ${offset}`)
}

const writeU32 = (value: number): Array<number> => {
  const out: Array<number> = []
  do {
    let byte = value & 0x7f
    value = Math.floor(value / 128)
    if (value !== 0) byte |= 0x80
    out.push(byte)
  } while (value !== 0)
  return out
}

/** What was found and what the module now declares. */
export interface Limited {
  readonly bytes: Uint8Array
  /** Pages the module starts with (0 when it defines no memory). */
  readonly initialPages: number
  /** The maximum it now declares. */
  readonly maxPages: number
}

/**
 * Rewrite the module so that its memory declares a maximum of at most `maxPages` pages (64 KiB
 * each). Throws (with a reason for people) on a module that is not WebAssembly, defines more than
 * one memory, a shared or 64-bit memory, or needs more than `maxPages` to start.
 */
export const limitMemory = (input: Uint8Array, maxPages: number): Limited => {
  if (
    input.length < 8 ||
    input[0] !== 0x00 ||
    input[1] !== 0x61 ||
    input[2] !== 0x73 ||
    input[3] !== 0x6d ||
    input[4] !== 0x01 ||
    input[5] !== 0x00 ||
    input[6] !== 0x00 ||
    input[7] !== 0x00
  ) {
    throw new Error("not a WebAssembly module (version 1)")
  }
  let offset = 8
  while (offset < input.length) {
    const id = input[offset]!
    const size = readU32(input, offset + 1)
    const start = size.next
    const end = start + size.value
    if (end > input.length) throw new Error("truncated section")
    if (id !== MEMORY_SECTION) {
      offset = end
      continue
    }
    const count = readU32(input, start)
    if (count.value === 0) return { bytes: input, initialPages: 0, maxPages: 0 }
    if (count.value > 1) throw new Error("defines more than one memory")
    const flags = input[count.next]
    if (flags !== 0x00 && flags !== 0x01) {
      throw new Error(
        (flags ?? 0) & 0x02 ? "defines a shared memory" : (flags ?? 0) & 0x04 ? "defines a 64-bit memory" : "bad memory"
      )
    }
    const min = readU32(input, count.next + 1)
    const declared = flags === 0x01 ? readU32(input, min.next) : undefined
    const limitEnd = declared?.next ?? min.next
    if (limitEnd !== end) throw new Error("malformed memory section")
    if (min.value > maxPages) {
      throw new Error(`needs ${min.value} memory pages to start; the limit is ${maxPages}`)
    }
    const max = Math.min(declared?.value ?? maxPages, maxPages)
    const body = [...writeU32(1), 0x01, ...writeU32(min.value), ...writeU32(max)]
    const section = [MEMORY_SECTION, ...writeU32(body.length), ...body]
    const out = new Uint8Array(offset + section.length + (input.length - end))
    out.set(input.subarray(0, offset), 0)
    out.set(section, offset)
    out.set(input.subarray(end), offset + section.length)
    if (!wasm.validate(out)) throw new Error("does not validate after setting its memory limit")
    return { bytes: out, initialPages: min.value, maxPages: max }
  }
  return { bytes: input, initialPages: 0, maxPages: 0 }
}
