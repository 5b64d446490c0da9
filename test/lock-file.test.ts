// package-lock.json must stay in sync with package.json, or `npm ci` (the README's install command) fails on a fresh
// clone. The check reads both files, needs no network, and fails on planted mismatches.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";
import { type LockFile, lockFileProblems, type PackageFields, satisfies } from "./rules/lock-file.js";

const read = <T>(file: string): T => JSON.parse(readFileSync(new URL(`../${file}`, import.meta.url), "utf8")) as T;
const PKG = read<PackageFields>("package.json");
const LOCK = read<LockFile>("package-lock.json");

/** Deep copies to plant a change in. */
const copy = <T>(x: T): T => structuredClone(x);

describe("package-lock.json agrees with package.json", () => {
  test("the committed files are in sync", () => {
    assert.deepEqual(lockFileProblems(PKG, LOCK), []);
  });

  test("the check reads every range of the committed lock file", () => {
    assert.ok(Object.keys(LOCK.packages ?? {}).length > 10, "the lock file lists the installed packages");
    const unread = lockFileProblems(PKG, LOCK).filter((l) => l.includes("not one this check reads"));
    assert.deepEqual(unread, []);
  });

  const planted: [string, (pkg: PackageFields, lock: LockFile) => void, RegExp][] = [
    [
      "a range changed in package.json",
      (pkg) => {
        pkg.dependencies!["commander"] = "^13.0.0";
      },
      /^dependencies commander: package\.json has "\^13\.0\.0", the lock file's root "\^14\.0\.3"$/,
    ],
    [
      "a dependency added to package.json",
      (pkg) => {
        pkg.devDependencies!["left-pad"] = "^1.3.0";
      },
      /^devDependencies left-pad: package\.json has "\^1\.3\.0", the lock file's root nothing$/,
    ],
    [
      "a dependency removed from package.json",
      (pkg) => {
        delete pkg.devDependencies!["tsx"];
      },
      /^devDependencies tsx: package\.json has nothing, the lock file's root "\^4\.23\.15"$/,
    ],
    [
      "a dependency moved from devDependencies to dependencies",
      (pkg) => {
        pkg.dependencies!["typescript"] = pkg.devDependencies!["typescript"]!;
        delete pkg.devDependencies!["typescript"];
      },
      /^dependencies typescript: package\.json has "\^5\.9\.3", the lock file's root nothing$/,
    ],
    [
      "the version bumped in package.json only",
      (pkg) => {
        pkg.version = "0.2.0";
      },
      /^version: package\.json has "0\.2\.0", the lock file "0\.1\.0"$/,
    ],
    [
      "the root and package.json changed together, the locked package not",
      (pkg, lock) => {
        pkg.dependencies!["commander"] = "^15.0.0";
        lock.packages![""]!.dependencies!["commander"] = "^15.0.0";
      },
      /^the root needs commander@\^15\.0\.0: node_modules\/commander is locked at "14\.0\.3"$/,
    ],
    [
      "a locked package removed",
      (_pkg, lock) => {
        delete lock.packages!["node_modules/esbuild"];
      },
      /^node_modules\/tsx needs esbuild@~0\.28\.0: no locked package provides it$/,
    ],
    [
      "a locked package at a version its dependant does not accept",
      (_pkg, lock) => {
        lock.packages!["node_modules/esbuild"]!.version = "0.29.0";
      },
      /^node_modules\/tsx needs esbuild@~0\.28\.0: node_modules\/esbuild is locked at "0\.29\.0"$/,
    ],
    [
      "a lock file of npm 6",
      (_pkg, lock) => {
        lock.lockfileVersion = 1;
      },
      /^lockfileVersion 1 has no "packages" section; npm ci needs version 2 or 3$/,
    ],
  ];
  for (const [name, plant, problem] of planted) {
    test(`fails on a planted mismatch: ${name}`, () => {
      const [pkg, lock] = [copy(PKG), copy(LOCK)];
      plant(pkg, lock);
      const problems = lockFileProblems(pkg, lock);
      assert.ok(
        problems.some((l) => problem.test(l)),
        `expected a line matching ${problem}; got:\n${problems.join("\n")}`,
      );
    });
  }

  test("an optional dependency may be absent (npm skips other platforms' binaries)", () => {
    const lock = copy(LOCK);
    delete lock.packages!["node_modules/fsevents"];
    assert.deepEqual(lockFileProblems(PKG, lock), []);
  });

  test("a nested copy is found before the root one (node_modules lookup)", () => {
    const lock = copy(LOCK);
    lock.packages!["node_modules/esbuild"]!.version = "0.29.0";
    lock.packages!["node_modules/tsx/node_modules/esbuild"] = { version: "0.28.9" };
    assert.deepEqual(lockFileProblems(PKG, lock), []);
  });
});

describe("semver ranges as npm reads them", () => {
  const cases: [string, string, boolean][] = [
    ["14.0.3", "^14.0.3", true],
    ["14.9.0", "^14.0.3", true],
    ["15.0.0", "^14.0.3", false],
    ["14.0.2", "^14.0.3", false],
    ["0.2.9", "^0.2.3", true],
    ["0.3.0", "^0.2.3", false],
    ["0.0.3", "^0.0.3", true],
    ["0.0.4", "^0.0.3", false],
    ["0.9.0", "^0.x", true],
    ["0.28.5", "~0.28.0", true],
    ["0.29.0", "~0.28.0", false],
    ["1.9.9", "~1", true],
    ["2.0.0", "~1", false],
    ["2.6.8", "2.6.8", true],
    ["2.6.9", "2.6.8", false],
    ["1.2.7", "1.2", true],
    ["1.3.0", "1.2.x", false],
    ["3.0.0", "*", true],
    ["3.0.0", "", true],
    ["12.0.0", "^8.16.0 || ^10.6.0 || >=11.0.0", true],
    ["9.0.0", "^8.16.0 || ^10.6.0 || >=11.0.0", false],
    ["1.5.0", ">= 1.2.3 < 2", true],
    ["2.0.0", ">=1.2.3 <2", false],
    ["2.3.9", "1.2.3 - 2.3", true],
    ["2.4.0", "1.2.3 - 2.3", false],
    ["1.0.0", ">1.0.0", false],
    ["1.0.0", "<=1.0.0", true],
    ["1.0.0-beta.2", "^1.0.0-beta.1", true],
    ["1.0.0-beta.2", "^1.0.0", false],
    ["1.0.0", "^1.0.0-beta.1", true],
    ["1.0.1-rc.1", "^1.0.0-beta.1", false],
    ["1.0.0-alpha", "1.0.0-alpha.1", false],
  ];
  for (const [version, range, expected] of cases) {
    test(`${version} ${expected ? "is" : "is not"} in "${range}"`, () => {
      assert.equal(satisfies(version, range), expected);
    });
  }

  test("a range it cannot read is reported, not passed", () => {
    assert.equal(satisfies("1.0.0", "latest"), undefined);
    const [pkg, lock] = [copy(PKG), copy(LOCK)];
    pkg.dependencies!["commander"] = "latest";
    lock.packages![""]!.dependencies!["commander"] = "latest";
    assert.deepEqual(lockFileProblems(pkg, lock), [
      "the root needs commander@latest: the range is not one this check reads",
    ]);
  });
});
