// http-get: fetches a URL through the host's `palyra_http_fetch` (the daemon's guarded fetch, with
// its allowlist). `get_native` tries Extism's own HTTP instead, which Palyra leaves switched off.
import { Host, Memory } from "@extism/as-pdk"
import { httpFetch, jsonString, output, quote } from "../../shared/palyra"

export { abort } from "../../shared/palyra"

@external("extism:host/env", "http_request")
declare function http_request(request: u64, body: u64): u64

export function get(): i32 {
  const url = jsonString(Host.inputString(), "url")
  if (url === null) {
    output('{"error":"missing url"}')
    return 1
  }
  const response = httpFetch('{"url":' + quote(url) + ',"method":"GET"}')
  if (!response.ok) {
    output('{"error":' + quote(response.text()) + "}")
    return 1
  }
  // The host's answer is already JSON: {"status":…,"headers":{…},"body":"…","truncated":…}
  output('{"response":' + response.text() + "}")
  return 0
}

export function get_native(): i32 {
  const url = jsonString(Host.inputString(), "url")
  if (url === null) return 1
  const request = Memory.allocateString('{"url":' + quote(url) + ',"method":"GET","headers":{}}')
  const offset = http_request(request.offset, 0)
  output('{"native":' + (offset == 0 ? "null" : "true") + "}")
  return 0
}
