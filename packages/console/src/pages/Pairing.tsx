/**
 * Pairing (operators): mint a code that pairs a chat-platform identity with a principal (shown once,
 * with a copy button), the codes with their status (revoke an unused one), the paired identities
 * (unpair). Without `[[channels]]` the daemon answers "channels are not configured", shown as is.
 */
import { useSignal } from "@preact/signals"
import { api, messageOf, shortId, time } from "../api.js"
import type { paths } from "../gen/api.js"
import { act, Failure, useList } from "./common.js"

type Minted = paths["/v1/pairing/codes"]["post"]["responses"]["201"]["content"]["application/json"]

const TTL: ReadonlyArray<readonly [string, string]> = [
  ["600", "10 minutes"],
  ["3600", "1 hour"],
  ["86400", "1 day"],
  ["604800", "7 days"]
]

const MintForm = ({ channels, onMinted }: { channels: ReadonlyArray<string>; onMinted: () => Promise<void> }) => {
  // Empty, not the first known channel: the known ones are offered by the datalist, and what the
  // field starts with must not depend on which list answered first.
  const channel = useSignal("")
  const principal = useSignal("")
  const ttl = useSignal("600")
  const minted = useSignal<Minted | null>(null)
  const copied = useSignal(false)
  const error = useSignal<string | null>(null)
  const busy = useSignal(false)
  const submit = async (e: Event) => {
    e.preventDefault()
    busy.value = true
    copied.value = false
    const { data, error: failed } = await api.POST("/v1/pairing/codes", {
      body: { channel: channel.value.trim(), principal: principal.value.trim(), ttlSeconds: Number(ttl.value) }
    })
    busy.value = false
    minted.value = data ?? null
    error.value = data ? null : messageOf(failed)
    if (data) await onMinted()
  }
  const copy = async () => {
    if (!minted.value) return
    // The clipboard may be refused (no permission): then select the code for a manual copy.
    copied.value = await navigator.clipboard.writeText(minted.value.code).then(
      () => true,
      () => {
        const code = document.querySelector("[data-testid=minted-code]")
        if (code) getSelection()?.selectAllChildren(code)
        return false
      }
    )
  }
  return (
    <form class="card" onSubmit={submit} aria-labelledby="mint-title">
      <h2 id="mint-title">Mint a pairing code</h2>
      <div class="row">
        <label>
          Channel{" "}
          <input
            required
            list="pairing-channels"
            pattern="[a-z0-9][a-z0-9_\-]{0,63}"
            value={channel.value}
            onInput={(e) => (channel.value = e.currentTarget.value)}
          />
        </label>
        <datalist id="pairing-channels">
          {channels.map((c) => (
            <option key={c} value={c} />
          ))}
        </datalist>
        <label>
          Principal{" "}
          <input
            required
            maxLength={256}
            value={principal.value}
            onInput={(e) => (principal.value = e.currentTarget.value)}
          />
        </label>
        <label>
          Valid for{" "}
          <select value={ttl.value} onChange={(e) => (ttl.value = e.currentTarget.value)}>
            {TTL.map(([v, label]) => (
              <option key={v} value={v}>
                {label}
              </option>
            ))}
          </select>
        </label>
        <button type="submit" disabled={busy.value}>
          Mint code
        </button>
      </div>
      <Failure error={error} />
      {minted.value && (
        <div class="notice" role="status">
          <p>
            Code for <strong>{minted.value.principal}</strong> on {minted.value.channel}, valid until{" "}
            {time(minted.value.expiresAt)}. It is shown only now:
          </p>
          <p class="row">
            <code class="secret" data-testid="minted-code">
              {minted.value.code}
            </code>
            <button type="button" class="secondary small" onClick={copy}>
              {copied.value ? "Copied" : "Copy"}
              <span class="sr-only"> the pairing code</span>
            </button>
          </p>
        </div>
      )}
    </form>
  )
}

export const Pairing = () => {
  const codes = useList(() => api.GET("/v1/pairing/codes", {}), [])
  const identities = useList(() => api.GET("/v1/pairing/identities", {}), [])
  const run = act(codes.error, async () => {
    await Promise.all([codes.reload(), identities.reload()])
  })
  const channels = [
    ...new Set([
      ...(codes.rows.value ?? []).map((c) => c.channel),
      ...(identities.rows.value ?? []).map((i) => i.channel)
    ])
  ]
  // Without channels every route answers the same message: show it once.
  const unavailable = codes.rows.value === null && codes.error.value !== null
  return (
    <section>
      <h1 tabIndex={-1}>Pairing</h1>
      <Failure error={codes.error} />
      {!unavailable && (
        <>
          {/* Only once the codes answered: without channels that answer is an error, and a form
              shown meanwhile would vanish under the user's hands. */}
          {codes.rows.value !== null && <MintForm channels={channels} onMinted={codes.reload} />}
          <h2>Codes</h2>
          {codes.rows.value === null ? (
            <p>Loading…</p>
          ) : codes.rows.value.length === 0 ? (
            <p>No pairing codes.</p>
          ) : (
            <div class="table-wrap">
              <table>
                <thead>
                  <tr>
                    <th scope="col">Code</th>
                    <th scope="col">Channel</th>
                    <th scope="col">Principal</th>
                    <th scope="col">Status</th>
                    <th scope="col">Expires</th>
                    <th scope="col">
                      <span class="sr-only">Actions</span>
                    </th>
                  </tr>
                </thead>
                <tbody>
                  {codes.rows.value.map((c) => (
                    <tr key={c.id}>
                      <td>
                        <code>{shortId(c.id)}</code>
                      </td>
                      <td>{c.channel}</td>
                      <td>{c.principal}</td>
                      <td>
                        <span class={`badge code-${c.status}`}>{c.status}</span>
                      </td>
                      <td>{time(c.expiresAt)}</td>
                      <td>
                        {c.status === "active" && (
                          <button
                            type="button"
                            class="danger small"
                            onClick={() =>
                              run(() => api.DELETE("/v1/pairing/codes/{code}", { params: { path: { code: c.id } } }))
                            }
                          >
                            Revoke<span class="sr-only"> the code for {c.principal}</span>
                          </button>
                        )}
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
          <h2>Paired identities</h2>
          <Failure error={identities.error} />
          {identities.rows.value === null ? (
            <p>Loading…</p>
          ) : identities.rows.value.length === 0 ? (
            <p>No paired identities.</p>
          ) : (
            <div class="table-wrap">
              <table>
                <thead>
                  <tr>
                    <th scope="col">Channel</th>
                    <th scope="col">Sender</th>
                    <th scope="col">Principal</th>
                    <th scope="col">Paired</th>
                    <th scope="col">Status</th>
                    <th scope="col">
                      <span class="sr-only">Actions</span>
                    </th>
                  </tr>
                </thead>
                <tbody>
                  {identities.rows.value.map((i) => (
                    <tr key={i.id}>
                      <td>{i.channel}</td>
                      <td>
                        <code>{i.senderId}</code>
                        {i.account ? <span class="muted"> @ {i.account}</span> : null}
                      </td>
                      <td>{i.principal}</td>
                      <td>
                        {time(i.createdAt)} by {i.createdBy}
                        {i.expiresAt ? ` · until ${time(i.expiresAt)}` : ""}
                      </td>
                      <td>
                        <span class="badge">{i.active ? "active" : "unpaired"}</span>
                      </td>
                      <td>
                        {i.active && (
                          <button
                            type="button"
                            class="danger small"
                            onClick={() =>
                              run(() => api.DELETE("/v1/pairing/identities/{id}", { params: { path: { id: i.id } } }))
                            }
                          >
                            Unpair<span class="sr-only"> {i.senderId}</span>
                          </button>
                        )}
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
        </>
      )}
    </section>
  )
}
