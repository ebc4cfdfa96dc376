import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import { parse } from 'yaml';
import { CertificateAuthority } from '../src/certificate/authority.js';
import { CertificateManager } from '../src/certificate/manager.js';
import { writeProxyBootstrap } from '../src/cli/bootstrap-command.js';
import { runController, type RunningController } from '../src/main.js';
import { serviceIdentity, XDS_SERVER_SPIFFE_ID } from '../src/proxy/types.js';
import { connectLikeEnvoy } from './helpers/envoy-like-tls.js';

type Obj = Record<string, unknown>;

/** What the written bootstrap's xDS cluster requires of the server: trusted CA file, URI SAN matchers, SNI. */
function xdsServerValidation(bootstrap: Obj): { caFile: string; uriSans: string[]; sni?: string } {
  const cluster = ((bootstrap.static_resources as Obj).clusters as Obj[])[0];
  const tlsContext = (cluster.transport_socket as Obj).typed_config as Obj;
  const validation = (tlsContext.common_tls_context as Obj).validation_context as Obj;
  const matchers = (validation.match_typed_subject_alt_names ?? []) as { san_type: string; matcher: { exact?: string } }[];
  return {
    caFile: String((validation.trusted_ca as Obj).filename),
    uriSans: matchers.filter((m) => m.san_type === 'URI' && m.matcher.exact !== undefined).map((m) => m.matcher.exact!),
    ...(typeof tlsContext.sni === 'string' ? { sni: tlsContext.sni } : {}),
  };
}

describe("the xDS server's identity, as a proxy with the written bootstrap checks it", () => {
  let dir: string;
  let running: RunningController;
  let required: { caFile: string; uriSans: string[] };
  let client: { certPem: string; keyPem: string; caPem: string };
  let impostor: tls.Server;
  let impostorPort: number;

  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'trellis-xds-identity-'));
    const stateDir = path.join(dir, 'state');
    running = await runController({
      manifests: 'examples/bookstore',
      meshName: 'osm',
      stateDir,
      xdsAddress: '127.0.0.1:0',
      httpAddress: '127.0.0.1:0',
      resyncIntervalMs: 0,
      warmUpConfigurationBytes: 0,
      logger: pino({ level: 'silent' }),
    });
    const written = await writeProxyBootstrap({
      namespace: 'bookbuyer',
      serviceAccount: 'bookbuyer',
      out: path.join(dir, 'bookbuyer'),
      stateDir,
      xdsAddress: `127.0.0.1:${running.xdsPort}`,
    });
    required = xdsServerValidation(parse(await readFile(written.files.bootstrap, 'utf8')) as Obj);
    client = {
      certPem: await readFile(written.files.cert, 'utf8'),
      keyPem: await readFile(written.files.key, 'utf8'),
      caPem: await readFile(required.caFile, 'utf8'),
    };
    // A mesh workload serving its own service certificate (same CA), posing as the controller. Its
    // service account is chosen so that its DNS SAN is one of the controller's DNS names.
    const manager = new CertificateManager({ ca: await CertificateAuthority.loadOrCreate(stateDir) });
    const workload = await manager.getServiceCertificate(serviceIdentity('svc', 'osm-controller.osm-system'));
    manager.stop();
    impostor = tls.createServer({ cert: workload.certPem, key: workload.keyPem, ALPNProtocols: ['h2'] }, (s) => s.end());
    impostorPort = await new Promise<number>((resolve) => impostor.listen(0, '127.0.0.1', () => resolve((impostor.address() as { port: number }).port)));
  });

  after(async () => {
    await new Promise<void>((resolve) => impostor.close(() => resolve()));
    await running.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it("requires the controller's URI SAN, and the controller's certificate carries it", async () => {
    assert.deepEqual(required.uriSans, [XDS_SERVER_SPIFFE_ID]);
    const uris = await connectLikeEnvoy({ port: running.xdsPort, ...client, uriSans: required.uriSans });
    assert.deepEqual(uris, [XDS_SERVER_SPIFFE_ID]);
  });

  it("refuses a server presenting a sidecar's service certificate of the same CA, whose DNS SAN is a controller name", async () => {
    assert.ok(required.uriSans.length > 0, 'the bootstrap requires a URI SAN');
    await assert.rejects(
      connectLikeEnvoy({ port: impostorPort, ...client, uriSans: required.uriSans }),
      /no URI SAN of the server certificate \(spiffe:\/\/cluster\.local\/ns\/svc\/sa\/osm-controller\.osm-system\) matches spiffe:\/\/cluster\.local\/osm-controller/,
    );
    // What a chain-only check, or a DNS-name check on a controller name, would have let through.
    const dnsOnly = await new Promise<boolean>((resolve) => {
      const s = tls.connect({ host: '127.0.0.1', port: impostorPort, ca: client.caPem, servername: 'osm-controller.osm-system.svc.cluster.local' });
      s.once('secureConnect', () => (s.end(), resolve(true)));
      s.once('error', () => resolve(false));
    });
    assert.equal(dnsOnly, true, 'the impostor passes a DNS-name check');
  });
});
