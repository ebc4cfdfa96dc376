// Module customization hooks (node:module `register`) that append every module resolution of the
// process to a file, one JSON line each: { specifier, parent, url }. Registered by
// module-resolutions.mjs; they run on Node's hooks thread, hence the synchronous appends.
import { appendFileSync } from 'node:fs';

let file;

/** Receives the file to append to (the `data` given to `register`). */
export function initialize(data) {
  file = data.file;
}

/** Resolves as the next hook does, and records what it resolved to. */
export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context);
  appendFileSync(file, `${JSON.stringify({ specifier, parent: context.parentURL ?? null, url: resolved.url })}\n`);
  return resolved;
}
