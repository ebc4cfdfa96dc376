/**
 * `trellis validate DIR` on directories a careless user makes: symbolic links that lead nowhere
 * (dangling, a loop) must be reported as files that cannot be read (exit 1), never dropped
 * without a word: the controller's loader is the same, so it would silently leave the manifest out.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';

const CLI = path.resolve(import.meta.dirname, 'helpers/cli-main.ts');
const EXAMPLE = path.resolve(import.meta.dirname, '../examples/bookstore');

function validate(dir: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['--import', 'tsx', CLI, 'validate', dir], { encoding: 'utf8', timeout: 60_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? ((error as { code?: number }).code ?? null) : 0, stdout, stderr });
    });
  });
}

describe('trellis validate on hostile directories', () => {
  const dirs: string[] = [];
  after(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  it('reports a dangling symbolic link and a link loop as unreadable files (exit 1)', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 's9b-validate-'));
    dirs.push(dir);
    cpSync(EXAMPLE, dir, { recursive: true });
    symlinkSync(path.join(dir, 'no-such-file.yaml'), path.join(dir, 'gone.yaml'));
    symlinkSync('loop-b.yaml', path.join(dir, 'loop-a.yaml'));
    symlinkSync('loop-a.yaml', path.join(dir, 'loop-b.yaml'));
    const r = await validate(dir);
    assert.equal(r.code, 1, r.stdout + r.stderr);
    const out = r.stdout + r.stderr;
    assert.match(out, /gone\.yaml:1: cannot read the file \(a symbolic link to a file that does not exist\)/);
    assert.match(out, /loop-a\.yaml:1: cannot read the file \(ELOOP\)/);
    assert.match(out, /loop-b\.yaml:1: cannot read the file \(ELOOP\)/);
  });
});
