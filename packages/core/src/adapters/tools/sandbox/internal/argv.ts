import { lstatSync, readlinkSync } from "node:fs"

/** Resource limits with every value set. @internal */
export interface ResolvedLimits {
  readonly cpuSeconds: number
  readonly memoryBytes: number
  readonly fileBytes: number
  readonly processes: number
}

/**
 * util-linux `prlimit` options that set the limits and then exec the command (same pid, so the
 * process group and the kill semantics do not change). CPU gets a one-second gap between the soft
 * limit (SIGXCPU) and the hard one (SIGKILL); core dumps are off, so a crash never writes the
 * process's memory into the workspace.
 *
 * @internal
 */
export const prlimitArgs = (limits: ResolvedLimits): Array<string> => [
  `--cpu=${limits.cpuSeconds}:${limits.cpuSeconds + 1}`,
  `--as=${limits.memoryBytes}`,
  `--fsize=${limits.fileBytes}`,
  `--nproc=${limits.processes}`,
  "--core=0",
  "--"
]

/** Top-level system directories that may be real directories or (merged /usr) symlinks. */
const systemDirs = ["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"]

/** The little of /etc that programs need to link, name users, resolve names and check TLS. */
const etcFiles = [
  "/etc/ld.so.cache",
  "/etc/ld.so.conf",
  "/etc/ld.so.conf.d",
  "/etc/alternatives",
  "/etc/passwd",
  "/etc/group",
  "/etc/nsswitch.conf",
  "/etc/hosts",
  "/etc/host.conf",
  "/etc/resolv.conf",
  "/etc/gai.conf",
  "/etc/localtime",
  "/etc/ssl",
  "/etc/ca-certificates",
  "/etc/pki"
]

/** Paths under which programs are visible inside the `os` sandbox (besides the workspace). @internal */
export const visibleRoots = ["/usr", ...systemDirs]

let systemMounts: Array<string> | undefined
/** Mirror the host's layout of /bin, /lib… : a symlink stays a symlink, a directory is bound read-only. */
const systemDirArgs = (): Array<string> => {
  if (systemMounts !== undefined) return systemMounts
  const args: Array<string> = []
  for (const dir of systemDirs) {
    try {
      const stat = lstatSync(dir)
      if (stat.isSymbolicLink()) args.push("--symlink", readlinkSync(dir), dir)
      else if (stat.isDirectory()) args.push("--ro-bind", dir, dir)
    } catch {
      // not on this system
    }
  }
  systemMounts = args
  return args
}

/** @internal */
export interface BwrapPlan {
  /** The workspace's real path; bound at the same path so paths mean the same inside and out. */
  readonly workspace: string
  readonly workspaceMode: "rw" | "ro"
  readonly cwd: string
  readonly network: "deny" | "allow"
  readonly env: Readonly<Record<string, string>>
  /** The fd bubblewrap reports on (`{"child-pid": …}` once started, `{"exit-code": …}` at the end). */
  readonly statusFd: number
}

/**
 * bubblewrap options for the `os` tier: new user, pid, ipc, uts (and cgroup) namespaces, no network
 * unless allowed, all capabilities dropped, read-only system directories, a minimal /etc, a private
 * /tmp, the new pid namespace's /proc, a minimal /dev, the workspace, a cleared environment; the
 * sandbox dies with bubblewrap (`--die-with-parent`) and cannot reach the caller's terminal
 * (`--new-session`).
 *
 * @internal
 */
export const bwrapArgs = (plan: BwrapPlan): Array<string> => [
  "--unshare-user",
  "--unshare-pid",
  "--unshare-ipc",
  "--unshare-uts",
  "--unshare-cgroup-try",
  ...(plan.network === "deny" ? ["--unshare-net"] : []),
  "--die-with-parent",
  "--new-session",
  "--cap-drop",
  "ALL",
  "--hostname",
  "palyra-sandbox",
  "--ro-bind",
  "/usr",
  "/usr",
  ...systemDirArgs(),
  ...etcFiles.flatMap((file) => ["--ro-bind-try", file, file]),
  "--proc",
  "/proc",
  "--dev",
  "/dev",
  "--tmpfs",
  "/tmp",
  plan.workspaceMode === "rw" ? "--bind" : "--ro-bind",
  plan.workspace,
  plan.workspace,
  "--chdir",
  plan.cwd,
  "--clearenv",
  ...Object.entries(plan.env).flatMap(([name, value]) => ["--setenv", name, value]),
  "--json-status-fd",
  String(plan.statusFd),
  "--"
]

/** bubblewrap's exit-code record on the status fd, if it wrote one (it does only when the command ran). @internal */
export const statusExitCode = (status: string): number | undefined => {
  for (const line of status.split("\n")) {
    if (line.trim() === "") continue
    try {
      const record: unknown = JSON.parse(line)
      if (typeof record === "object" && record !== null && "exit-code" in record) {
        const code = (record as { "exit-code": unknown })["exit-code"]
        if (typeof code === "number") return code
      }
    } catch {
      // not a record
    }
  }
  return undefined
}
