/**
 * Whether package-lock.json agrees with package.json, checked without the network: `npm ci` installs exactly the lock
 * file and refuses it when it is out of sync with package.json, which a fresh clone only finds out at install time
 * (and `npm ci --dry-run --offline` does not reliably: it passed with a dependency removed from package.json and
 * failed for want of the registry with one added). The checks:
 *
 * - the lock's name and version, and its root package's dependency lists, equal package.json's (what npm ci compares);
 * - every dependency of the root, and of every package in the lock, resolves (node_modules lookup, nearest first) to
 *   a locked package whose version satisfies the range asked for; an optional dependency may be absent.
 *
 * Ranges are npm's semver ranges in the forms package files use (^, ~, comparators, x-ranges, hyphens, ||); a range
 * this file cannot read is reported as a problem rather than passed.
 */

/** The fields of package.json and of a lock entry that the checks read. */
export interface PackageFields {
  name?: string;
  version?: string;
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  optional?: boolean;
}

export interface LockFile {
  name?: string;
  version?: string;
  lockfileVersion?: number;
  packages?: Record<string, PackageFields>;
}

const LISTS = ["dependencies", "devDependencies", "optionalDependencies", "peerDependencies"] as const;

/** One line per disagreement between `pkg` (package.json) and `lock` (package-lock.json); empty when in sync. */
export function lockFileProblems(pkg: PackageFields, lock: LockFile): string[] {
  const out: string[] = [];
  if (lock.name !== pkg.name) out.push(`name: package.json has ${show(pkg.name)}, the lock file ${show(lock.name)}`);
  if (lock.version !== pkg.version) {
    out.push(`version: package.json has ${show(pkg.version)}, the lock file ${show(lock.version)}`);
  }
  const packages = lock.packages;
  if (!packages || (lock.lockfileVersion ?? 0) < 2) {
    out.push(`lockfileVersion ${show(lock.lockfileVersion)} has no "packages" section; npm ci needs version 2 or 3`);
    return out;
  }
  const root = packages[""];
  if (!root) return [...out, 'the lock file has no root package (packages[""])'];
  for (const k of ["name", "version"] as const) {
    if (root[k] !== pkg[k]) out.push(`root ${k}: package.json has ${show(pkg[k])}, the lock file ${show(root[k])}`);
  }
  for (const list of LISTS) {
    const want = pkg[list] ?? {};
    const have = root[list] ?? {};
    for (const name of new Set([...Object.keys(want), ...Object.keys(have)])) {
      if (want[name] !== have[name]) {
        out.push(`${list} ${name}: package.json has ${show(want[name])}, the lock file's root ${show(have[name])}`);
      }
    }
  }
  for (const [path, entry] of Object.entries(packages)) {
    for (const list of ["dependencies", "devDependencies", "optionalDependencies"] as const) {
      // only the root installs its dev dependencies; a locked package's own are not installed
      if (list === "devDependencies" && path !== "") continue;
      for (const [name, range] of Object.entries(entry[list] ?? {})) {
        const problem = dependencyProblem(packages, path, name, range, list === "optionalDependencies");
        if (problem) out.push(`${path === "" ? "the root" : path} needs ${name}@${range}: ${problem}`);
      }
    }
  }
  return out;
}

function show(v: unknown): string {
  return v === undefined ? "nothing" : JSON.stringify(v);
}

/** Why dependency `name@range` of the package at `from` is not met in the lock, or "" when it is. */
function dependencyProblem(
  packages: Record<string, PackageFields>,
  from: string,
  name: string,
  range: string,
  optional: boolean,
): string {
  const at = resolve(packages, from, name);
  if (at === undefined) return optional ? "" : "no locked package provides it";
  const version = packages[at]!.version;
  if (!isRegistryRange(range)) return ""; // file:, git, URLs, aliases: present is all that can be checked here
  const ok = satisfies(version ?? "", range);
  if (ok === undefined) return `the range is not one this check reads`;
  return ok ? "" : `${at} is locked at ${show(version)}`;
}

/** Node's lookup: node_modules/name beside `from`, then beside each package above it, then at the root. */
function resolve(packages: Record<string, PackageFields>, from: string, name: string): string | undefined {
  let base = from;
  for (;;) {
    const path = `${base === "" ? "" : `${base}/`}node_modules/${name}`;
    if (packages[path] !== undefined) return path;
    if (base === "") return undefined;
    const up = base.lastIndexOf("/node_modules/");
    base = up < 0 ? "" : base.slice(0, up);
  }
}

function isRegistryRange(range: string): boolean {
  return !/^(file:|link:|git[+:]|https?:|npm:|workspace:)|\//.test(range);
}

// ---- semver ranges ----------------------------------------------------------------------------------------------

type Version = [number, number, number, string[]];

function parseVersion(v: string): Version | undefined {
  const m = /^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$/.exec(v.trim());
  return m ? [Number(m[1]), Number(m[2]), Number(m[3]), m[4] ? m[4].split(".") : []] : undefined;
}

function compare(a: Version, b: Version): number {
  for (let k = 0; k < 3; k++) if (a[k] !== b[k]) return (a[k] as number) - (b[k] as number);
  const [pa, pb] = [a[3], b[3]];
  if (pa.length === 0 || pb.length === 0) return pb.length - pa.length; // a release sorts after its prereleases
  for (let k = 0; k < Math.max(pa.length, pb.length); k++) {
    const [x, y] = [pa[k], pb[k]];
    if (x === undefined || y === undefined) return x === undefined ? -1 : 1;
    if (x === y) continue;
    const [nx, ny] = [/^\d+$/.test(x), /^\d+$/.test(y)];
    if (nx && ny) return Number(x) - Number(y);
    if (nx !== ny) return nx ? -1 : 1;
    return x < y ? -1 : 1;
  }
  return 0;
}

/** A partial version as ranges write it: 1, 1.2, 1.2.3, with x or * for missing parts. */
function parsePartial(v: string): { parts: number[]; pre: string[] } | undefined {
  const m = /^v?(\d+|[xX*])(?:\.(\d+|[xX*]))?(?:\.(\d+|[xX*]))?(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$/.exec(v);
  if (!m) return undefined;
  const parts: number[] = [];
  for (const p of [m[1], m[2], m[3]]) {
    if (p === undefined || /^[xX*]$/.test(p)) break;
    parts.push(Number(p));
  }
  return { parts, pre: m[4] ? m[4].split(".") : [] };
}

type Comparator = (v: Version) => boolean;

const at = (parts: number[], pre: string[] = []): Version => [parts[0] ?? 0, parts[1] ?? 0, parts[2] ?? 0, pre];
/** The first version above every version the partial `parts` (of length n < 3) stands for. */
const above = (parts: number[]): Version =>
  parts.length === 0 ? [Number.POSITIVE_INFINITY, 0, 0, []] : at([...parts.slice(0, -1), parts.at(-1)! + 1]);

function comparators(token: string): Comparator[] | undefined {
  const m = /^(\^|~>?|>=|<=|>|<|=)?\s*(.*)$/.exec(token)!;
  const op = m[1] ?? "";
  const p = parsePartial(m[2]!);
  if (!p) return undefined;
  const { parts, pre } = p;
  const lo = at(parts, pre);
  const ge =
    (x: Version): Comparator =>
    (v) =>
      compare(v, x) >= 0;
  const lt =
    (x: Version): Comparator =>
    (v) =>
      compare(v, x) < 0;
  switch (op) {
    case "":
    case "=":
      return parts.length === 3 ? [(v) => compare(v, lo) === 0] : [ge(lo), lt(above(parts))];
    case "^": {
      // up to the next change of the first non-zero part (of those given)
      const nz = parts.findIndex((x) => x !== 0);
      const keep = nz < 0 ? parts.length : nz + 1;
      return [ge(lo), lt(above(parts.slice(0, Math.max(1, keep))))];
    }
    case "~":
    case "~>":
      return [ge(lo), lt(above(parts.slice(0, Math.max(1, Math.min(2, parts.length)))))];
    case ">=":
      return [ge(lo)];
    case ">":
      return parts.length === 3 ? [(v) => compare(v, lo) > 0] : [ge(above(parts))];
    case "<":
      return [lt(lo)];
    case "<=":
      return parts.length === 3 ? [(v) => compare(v, lo) <= 0] : [lt(above(parts))];
  }
  return undefined;
}

/**
 * Whether `version` is in npm's semver range `range`; undefined when the range (or version) is not in a form this
 * reads. A prerelease version is only in a range one of whose comparators names a prerelease of the same x.y.z.
 */
export function satisfies(version: string, range: string): boolean | undefined {
  const v = parseVersion(version);
  if (!v) return undefined;
  let any = false;
  for (const alternative of range.split("||")) {
    const set = alternative.trim().replace(/(\^|~>?|>=|<=|>|<|=)\s+/g, "$1");
    const hyphen = /^(\S+)\s+-\s+(\S+)$/.exec(set);
    const tokens = hyphen ? [`>=${hyphen[1]}`, `<=${hyphen[2]}`] : set === "" ? ["*"] : set.split(/\s+/);
    const cs: Comparator[] = [];
    let preAllowed = v[3].length === 0;
    for (const t of tokens) {
      const c = comparators(t);
      if (!c) return undefined;
      cs.push(...c);
      const p = parsePartial(t.replace(/^(\^|~>?|>=|<=|>|<|=)/, ""));
      if (p && p.pre.length > 0 && p.parts.length === 3 && p.parts.every((x, k) => x === v[k])) preAllowed = true;
    }
    if (preAllowed && cs.every((c) => c(v))) any = true;
  }
  return any;
}
