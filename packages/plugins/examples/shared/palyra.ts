// Palyra's host functions for AssemblyScript plugins (compiled with @extism/as-pdk).
//
// Every host function takes the offset of an Extism memory block holding its request and returns
// the offset of a block holding its response: one status byte (0 = ok, 1 = refused or failed)
// followed by the payload (the result on success, a UTF-8 "reason: message" on failure).
import { Host, Memory } from "@extism/as-pdk"

@external("extism:host/user", "palyra_read_file")
declare function palyra_read_file(request: u64): u64

@external("extism:host/user", "palyra_http_fetch")
declare function palyra_http_fetch(request: u64): u64

@external("extism:host/env", "length")
declare function block_length(offset: u64): u64

/** The answer of a host function. */
export class Reply {
  constructor(
    public ok: bool,
    public payload: Uint8Array
  ) {}

  text(): string {
    return String.UTF8.decode(this.payload.buffer)
  }
}

function reply(offset: u64): Reply {
  if (offset == 0) return new Reply(false, Uint8Array.wrap(String.UTF8.encode("failed: no reply")))
  const all = new Memory(offset, block_length(offset)).toUint8Array()
  if (all.length == 0) return new Reply(false, new Uint8Array(0))
  return new Reply(all[0] == 0, all.slice(1))
}

/** Read a file of the workspace (needs the `fs.read` capability). */
export function readFile(path: string): Reply {
  return reply(palyra_read_file(Memory.allocateString(path).offset))
}

/** Fetch a URL through the daemon's guarded fetch (needs the `http.fetch` capability). */
export function httpFetch(requestJson: string): Reply {
  return reply(palyra_http_fetch(Memory.allocateString(requestJson).offset))
}

/** Write a UTF-8 string as the call's output (byte length, not UTF-16 length). */
export function output(s: string): void {
  Host.output(Uint8Array.wrap(String.UTF8.encode(s)))
}

/** Quote a string as JSON. */
export function quote(s: string): string {
  let out = '"'
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i)
    if (c == 0x22) out += '\\"'
    else if (c == 0x5c) out += "\\\\"
    else if (c == 0x0a) out += "\\n"
    else if (c == 0x0d) out += "\\r"
    else if (c == 0x09) out += "\\t"
    else if (c < 0x20) out += "\\u" + c.toString(16).padStart(4, "0")
    else out += String.fromCharCode(c)
  }
  return out + '"'
}

/**
 * The string value of `"key"` at the top level of a small JSON object (the host validates the
 * arguments against the manifest's schema before the plugin runs, so the shape is known).
 */
export function jsonString(json: string, key: string): string | null {
  const needle = quote(key)
  let at = json.indexOf(needle)
  while (at >= 0) {
    let i = at + needle.length
    while (i < json.length && (json.charCodeAt(i) == 0x20 || json.charCodeAt(i) == 0x0a)) i++
    if (i < json.length && json.charCodeAt(i) == 0x3a) {
      i++
      while (i < json.length && json.charCodeAt(i) == 0x20) i++
      if (i >= json.length || json.charCodeAt(i) != 0x22) return null
      i++
      let out = ""
      while (i < json.length) {
        const c = json.charCodeAt(i)
        if (c == 0x22) return out
        if (c == 0x5c && i + 1 < json.length) {
          const e = json.charCodeAt(i + 1)
          i += 2
          if (e == 0x6e) out += "\n"
          else if (e == 0x74) out += "\t"
          else if (e == 0x72) out += "\r"
          else if (e == 0x62) out += "\b"
          else if (e == 0x66) out += "\f"
          else if (e == 0x75 && i + 4 <= json.length) {
            out += String.fromCharCode(<i32>parseInt(json.substr(i, 4), 16))
            i += 4
          } else out += String.fromCharCode(e)
          continue
        }
        out += String.fromCharCode(c)
        i++
      }
      return null
    }
    at = json.indexOf(needle, at + 1)
  }
  return null
}

/** `abort` for `asc --use abort=...`: report through the host log, then trap. */
export function abort(message: string | null, fileName: string | null, line: u32, column: u32): void {
  Host.log(
    3,
    "abort: " + (message === null ? "?" : message) + " at " + (fileName === null ? "?" : fileName) + ":" +
      line.toString() + ":" + column.toString()
  )
  unreachable()
}
