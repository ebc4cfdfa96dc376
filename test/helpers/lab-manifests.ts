import { chmod, cp, mkdtemp } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';

/** examples/bookstore. */
export const BOOKSTORE_EXAMPLE = path.resolve(import.meta.dirname, '../../examples/bookstore');

/**
 * A temp dir (mode 0755: Envoy, as uid 1500, reads its bootstrap below it) holding a copy of
 * examples/bookstore as `manifests/`.
 */
export async function bookstoreLabDir(): Promise<{ dir: string; manifests: string }> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'tla-lab-'));
  await chmod(dir, 0o755);
  const manifests = path.join(dir, 'manifests');
  await cp(BOOKSTORE_EXAMPLE, manifests, { recursive: true });
  return { dir, manifests };
}
