/**
 * `trellis --version`: the package's version (package.json) and the git commit it was built from
 * (dist/build-info.json, which scripts/build.sh writes with scripts/build-info.sh, so a packed and
 * installed tarball knows it).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';

/** What `trellis --version` prints: the package version and the commit (`unknown` when not recorded). */
export interface BuildInfo {
  /** package.json `version`. */
  readonly version: string;
  /** The 40-hex commit, with `-dirty` when tracked files differed from it at build time; `unknown` when built outside a checkout. */
  readonly commit: string;
}

/** Reads and parses a JSON file, undefined when it is missing or not JSON. */
function readJson(file: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(readFileSync(file, 'utf8'));
    return typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The build information of the code running: `<codeDir>/build-info.json` (codeDir: dist/, or src/
 * when run from the sources, where there is none: `unknown`) and `<codeDir>/../package.json`.
 * @param codeDir the directory holding cli/ (default: this module's parent).
 */
export function readBuildInfo(codeDir: string = path.resolve(import.meta.dirname, '..')): BuildInfo {
  const pkg = readJson(path.join(codeDir, '..', 'package.json'));
  const info = readJson(path.join(codeDir, 'build-info.json'));
  return {
    version: typeof pkg?.version === 'string' ? pkg.version : 'unknown',
    commit: typeof info?.commit === 'string' && info.commit !== '' ? info.commit : 'unknown',
  };
}

/** `trellis 0.1.0 (commit 0c6e588…)`: the line `trellis --version` prints. */
export function versionText(info: BuildInfo): string {
  return `trellis ${info.version} (commit ${info.commit})`;
}
