// Loads a module of the compiled CLI (dist/, made from src/ by `npm run build`) for the commands in
// this folder. In a checkout (src/ beside dist/) it refuses a missing, unfinished or stale build,
// naming the newer source, so nothing runs code older than the sources; an installed package
// holds dist/ only.
import { existsSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const SOURCES = path.join(ROOT, 'src');
/** Written by scripts/build.sh when a build succeeds; its mtime is when that build started. */
const BUILD_STAMP = path.join(ROOT, 'dist', '.build-stamp');

/**
 * The newest file dist/ is compiled from: src/ without tests and the type-only generated proto
 * types, and the two tsconfig files.
 * @returns its path and mtime in ms.
 */
function newestSource() {
  let newest = { file: path.join(ROOT, 'tsconfig.json'), mtimeMs: 0 };
  /** @param {string} file */
  const consider = (file) => {
    const mtimeMs = statSync(file, { throwIfNoEntry: false })?.mtimeMs ?? 0;
    if (mtimeMs > newest.mtimeMs) newest = { file, mtimeMs };
  };
  consider(path.join(ROOT, 'tsconfig.json'));
  consider(path.join(ROOT, 'tsconfig.build.json'));
  /** @param {string} dir */
  const walk = (dir) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const file = path.join(dir, entry.name);
      if (entry.isDirectory()) {
        if (file !== path.join(SOURCES, 'api', 'generated')) walk(file);
      } else if (!entry.name.endsWith('.test.ts')) {
        consider(file);
      }
    }
  };
  walk(SOURCES);
  return newest;
}

/**
 * Imports `dist/<module>`; in a checkout, first exits with status 1 and a one-line message when
 * dist/ is missing or older than a source.
 * @param {string} module path below dist/, e.g. `cli/main.js`.
 */
export async function importCompiled(module) {
  if (existsSync(SOURCES)) {
    const built = statSync(BUILD_STAMP, { throwIfNoEntry: false })?.mtimeMs;
    const newest = built === undefined ? undefined : newestSource();
    if (built === undefined || (newest && newest.mtimeMs > built)) {
      const problem = newest ? `is older than ${path.relative(ROOT, newest.file)}` : 'holds no finished build';
      process.stderr.write(`trellis: ${path.join(ROOT, 'dist')} ${problem}: run \`npm run build\` (it compiles src/ into dist/)\n`);
      process.exit(1);
    }
  }
  return import(pathToFileURL(path.join(ROOT, 'dist', module)).href);
}
