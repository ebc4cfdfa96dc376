import { chmod, cp, mkdtemp, readdir, readFile, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseAllDocuments } from 'yaml';

/** examples/bookstore. */
export const BOOKSTORE_EXAMPLE = path.resolve(import.meta.dirname, '../../examples/bookstore');

/**
 * An app for `lab.trellis.dev/command`: HTTP on every port given, answering JSON
 * `{pod, namespace, method, path, headers}` (the pod from $POD_NAME the lab sets); stays up with none.
 */
export const JSON_HTTP_APP = [
  "const http=require('http');",
  'for(const p of process.argv.slice(1)){http.createServer((q,r)=>{',
  "r.setHeader('content-type','application/json');",
  'r.end(JSON.stringify({pod:process.env.POD_NAME,namespace:process.env.POD_NAMESPACE,method:q.method,path:q.url,headers:q.headers}))',
  '}).listen(Number(p))}',
  'setInterval(()=>{},1<<30);',
].join('');

/** Sets `lab.trellis.dev/command` on every Pod of the YAML files of `dir` to {@link JSON_HTTP_APP} on its container ports. */
export async function annotateWithJsonApp(dir: string): Promise<void> {
  for (const file of await readdir(dir)) {
    if (!file.endsWith('.yaml')) continue;
    const docs = parseAllDocuments(await readFile(path.join(dir, file), 'utf8'));
    for (const doc of docs) {
      if (doc.get('kind') !== 'Pod') continue;
      const spec = (doc.toJS() as { spec?: { containers?: { ports?: { containerPort: number }[] }[] } }).spec;
      const ports = (spec?.containers ?? []).flatMap((c) => (c.ports ?? []).map((p) => String(p.containerPort)));
      doc.setIn(['metadata', 'annotations', 'lab.trellis.dev/command'], JSON.stringify([process.execPath, '-e', JSON_HTTP_APP, ...ports]));
    }
    await writeFile(path.join(dir, file), docs.map((d) => d.toString()).join('---\n'));
  }
}

/**
 * A temp dir (mode 0755: Envoy, as uid 1500, reads its bootstrap below it) holding a copy of
 * examples/bookstore as `manifests/` (annotated with {@link JSON_HTTP_APP} when `annotate`).
 */
export async function bookstoreLabDir(annotate: boolean): Promise<{ dir: string; manifests: string }> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'tla-lab-'));
  await chmod(dir, 0o755);
  const manifests = path.join(dir, 'manifests');
  await cp(BOOKSTORE_EXAMPLE, manifests, { recursive: true });
  if (annotate) await annotateWithJsonApp(manifests);
  return { dir, manifests };
}
