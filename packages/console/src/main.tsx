/** The console's entry: sign-in gate, navigation, pages. */
import "./styles.css"
import { useSignal } from "@preact/signals"
import { type ComponentType, render } from "preact"
import { useEffect } from "preact/hooks"
import { api, restoreSession, session, setCsrfToken, signInNotice } from "./api.js"
import { type FeatureInfo, features, loadFeatures } from "./features.js"
import { Approvals } from "./pages/Approvals.js"
import { Grants } from "./pages/Grants.js"
import { Journal } from "./pages/Journal.js"
import { Runs } from "./pages/Runs.js"
import { Sessions } from "./pages/Sessions.js"
import { SessionView } from "./pages/SessionView.js"
import { SignIn } from "./pages/SignIn.js"
import { href, route } from "./router.js"

const PAGES = [
  ["approvals", "Approvals"],
  ["sessions", "Sessions"],
  ["runs", "Runs"],
  ["grants", "Grants"],
  ["journal", "Journal"]
] as const

/** The optional features' pages, each its own chunk, fetched on first visit. */
const FEATURE_PAGES: Record<FeatureInfo["id"], () => Promise<ComponentType>> = {
  pairing: () => import("./pages/Pairing.js").then((m) => m.Pairing),
  tasks: () => import("./pages/Tasks.js").then((m) => m.Tasks),
  learning: () => import("./pages/Learning.js").then((m) => m.Learning),
  memory: () => import("./pages/Memory.js").then((m) => m.Memory),
  incidents: () => import("./pages/Incidents.js").then((m) => m.Incidents)
}

const Lazy = ({ load }: { load: () => Promise<ComponentType> }) => {
  const page = useSignal<{ readonly Component: ComponentType } | null>(null)
  const failed = useSignal(false)
  useEffect(() => {
    load().then(
      (Component) => {
        page.value = { Component }
      },
      () => {
        failed.value = true
      }
    )
  }, [load])
  // The page's heading arrives after the route changed: move focus to it now.
  useEffect(() => {
    if (page.value) document.querySelector<HTMLElement>("main h1")?.focus()
  }, [page.value])
  if (failed.value)
    return (
      <p class="error" role="alert">
        This page could not be loaded. Reload to try again.
      </p>
    )
  if (!page.value) return <p class="loading">Loading…</p>
  const { Component } = page.value
  return <Component />
}

const Nav = () => {
  const current = route.value[0]
  const links: Array<readonly [string, string]> = [...PAGES, ...features.value.map((f) => [f.id, f.label] as const)]
  return (
    <nav aria-label="Main">
      <ul>
        {links.map(([id, label]) => (
          <li key={id}>
            <a href={href(id)} aria-current={current === id ? "page" : undefined}>
              {label}
            </a>
          </li>
        ))}
      </ul>
    </nav>
  )
}

const Page = () => {
  const [name, id] = route.value
  switch (name) {
    case "approvals":
      return <Approvals />
    case "sessions":
      return id ? <SessionView id={id} key={id} /> : <Sessions />
    case "runs":
      return <Runs />
    case "grants":
      return <Grants />
    case "journal":
      return <Journal />
    default: {
      const feature = features.value.find((f) => f.id === name)
      return feature ? (
        <Lazy load={FEATURE_PAGES[feature.id]} key={feature.id} />
      ) : (
        <section>
          <h1>Not found</h1>
          <p>
            There is no page here. <a href={href("approvals")}>Go to the approvals inbox</a>.
          </p>
        </section>
      )
    }
  }
}

const App = () => {
  const busy = useSignal(false)
  useEffect(() => {
    restoreSession().then((restored) => {
      session.value = restored
    })
  }, [])
  useEffect(() => {
    if (session.value) loadFeatures(session.value.operator)
  }, [session.value?.principal, session.value?.expiresAt])
  // Move focus to the new page's heading, so keyboard and screen reader users land on it.
  useEffect(() => {
    document.querySelector<HTMLElement>("main h1")?.focus()
  }, [route.value.join("/")])

  if (session.value === undefined) return <p class="loading">Loading…</p>
  if (session.value === null) return <SignIn />
  const signOut = async () => {
    busy.value = true
    await api.DELETE("/v1/auth/session")
    setCsrfToken(null)
    busy.value = false
    session.value = null
    signInNotice.value = "Signed out."
  }
  return (
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header>
        <span class="brand">Palyra</span>
        <Nav />
        <span class="who">
          {session.value.principal}
          {session.value.operator ? " (operator)" : ""}
        </span>
        <button type="button" class="ghost" onClick={signOut} disabled={busy.value}>
          Sign out
        </button>
      </header>
      <main id="main">
        <Page />
      </main>
    </>
  )
}

const root = document.getElementById("app")
if (root) render(<App />, root)
