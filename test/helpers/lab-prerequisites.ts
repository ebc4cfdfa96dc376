import { describeMissing, missingLabPrerequisites } from '../../src/lab/prerequisites.js';

/**
 * The `skip` option of a lab test: false when the host has root and `commands`, else the reason.
 * Under CI=true a missing prerequisite is a failure, not a skip (CI must run the lab tests).
 * @throws Error naming what is missing when CI=true.
 */
export function labTestSkip(commands: readonly string[], extra: readonly { what: string; howToGet: string }[] = []): false | string {
  const missing = [...missingLabPrerequisites(commands), ...extra];
  if (missing.length === 0) return false;
  const reason = describeMissing(missing);
  if (process.env.CI === 'true') throw new Error(`CI=true and the lab test cannot run: ${reason}`);
  return reason;
}
