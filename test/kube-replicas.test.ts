import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { loadOrCreateCaSecret, secretApiFor } from '../src/certificate/secret-store.js';
import { LeaderElector, leaseApiFor, leaseTime } from '../src/controller/leader-election.js';
import type { Timers } from '../src/messaging/debouncer.js';
import { FakeKubeApiServer } from './helpers/fake-kube-apiserver.js';
import { describeOn, RealKubeApiServer } from './helpers/kube-real-apiserver.js';

/** A clock the test moves by hand; timers are never fired (the test calls tryAcquireOrRenew). */
class ManualClock implements Timers {
  t = Date.UTC(2030, 0, 1);
  now(): number {
    return this.t;
  }
  setTimeout(): unknown {
    return undefined;
  }
  clearTimeout(): void {}
}

// Against the fake, and a real kube-apiserver (skipped without its binaries, which .ci/run installs);
// what only the fake can do (record requests, fail them) is checked against the fake only.
for (const target of ['fake', 'real'] as const) describeOn(target, `shared CA Secret and leader Lease against a ${target} API server`, () => {
  const fake = target === 'fake' ? new FakeKubeApiServer() : undefined;
  let server: FakeKubeApiServer | RealKubeApiServer;
  let kubeConfig: KubeConfig;
  before(async () => {
    server = fake ? await fake.start() : await RealKubeApiServer.start({ name: 'replicas', crds: false });
    kubeConfig = new KubeConfig();
    kubeConfig.loadFromString(server.kubeconfigYaml('osm-system'));
    await server.apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'osm-system' } });
  });
  after(() => (server instanceof RealKubeApiServer ? server.shutdown() : server?.stop()));

  it('creates the CA Secret once when several replicas start at once, and all use that root', async () => {
    const api = secretApiFor(kubeConfig);
    const results = await Promise.all([1, 2, 3].map(() => loadOrCreateCaSecret({ api, namespace: 'osm-system', name: 'race-ca' })));
    assert.equal(results.filter((r) => r.created).length, 1, 'exactly one replica created it');
    assert.equal(new Set(results.map((r) => r.ca.caPem)).size, 1, 'every replica has the same root');
    if (fake) {
      const posts = fake.requests.filter((r) => r.method === 'POST' && r.url.includes('/secrets'));
      assert.deepEqual(posts.map((r) => r.status).sort(), [201, 409, 409]);
    }
    const secret = (await server.get('Secret', 'osm-system', 'race-ca'))!;
    const data = secret.data as Record<string, string>;
    assert.equal(Buffer.from(data['ca.pem'], 'base64').toString(), results[0].ca.caPem);
    assert.match(Buffer.from(data['ca-key.pem'], 'base64').toString(), /BEGIN PRIVATE KEY/);

    const later = await loadOrCreateCaSecret({ api, namespace: 'osm-system', name: 'race-ca' });
    assert.equal(later.created, false);
    assert.equal(later.ca.caPem, results[0].ca.caPem, 'a restart loads the same root');
  });

  it('refuses a Secret that does not hold a CA, and never overwrites it', async () => {
    await server.apply({ apiVersion: 'v1', kind: 'Secret', metadata: { name: 'broken-ca', namespace: 'osm-system' }, data: { 'ca.pem': Buffer.from('nope').toString('base64') } });
    await assert.rejects(loadOrCreateCaSecret({ api: secretApiFor(kubeConfig), namespace: 'osm-system', name: 'broken-ca' }), /secret osm-system\/broken-ca.*ca-key\.pem/);
  });

  it('lets one replica hold the Lease at a time, and another take over when it expires or is released', async () => {
    const clock = new ManualClock();
    const api = leaseApiFor(kubeConfig);
    const events: string[] = [];
    const elector = (identity: string) =>
      new LeaderElector({
        api,
        namespace: 'osm-system',
        name: 'election',
        identity,
        timers: clock,
        onStartedLeading: () => events.push(`${identity} leads`),
        onStoppedLeading: () => events.push(`${identity} stops`),
      });
    const a = elector('replica-a');
    const b = elector('replica-b');

    // Both try at once: the Lease is created by one of them only.
    const [wonA, wonB] = await Promise.all([a.tryAcquireOrRenew(), b.tryAcquireOrRenew()]);
    assert.equal(Number(wonA) + Number(wonB), 1, 'one holder');
    const [leader, follower] = wonA ? [a, b] : [b, a];
    let lease = (await server.get('Lease', 'osm-system', 'election'))!;
    const spec = lease.spec as Record<string, unknown>;
    assert.equal(spec.holderIdentity, leader.identity);
    assert.equal(spec.leaseDurationSeconds, 15);
    assert.match(String(spec.renewTime), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/, 'renewTime is a MicroTime');

    // The leader renews; the follower keeps following while renewals come.
    for (let i = 0; i < 4; i++) {
      clock.t += 5_000;
      assert.equal(await leader.tryAcquireOrRenew(), true);
      assert.equal(await follower.tryAcquireOrRenew(), false);
    }
    const renewed = (await api.readNamespacedLease({ name: 'election', namespace: 'osm-system' })).spec!;
    // Read back through the client, renewTime is a string although typed as a Date.
    assert.equal(typeof renewed.renewTime, 'string');
    assert.equal(leaseTime(renewed.renewTime), clock.t);

    // The leader stops renewing (crashed): after the lease duration the follower takes over.
    clock.t += 10_000;
    assert.equal(await follower.tryAcquireOrRenew(), false, 'not yet expired');
    clock.t += 6_000;
    assert.equal(await follower.tryAcquireOrRenew(), true, 'expired: taken over');
    lease = (await server.get('Lease', 'osm-system', 'election'))!;
    assert.equal((lease.spec as Record<string, unknown>).holderIdentity, follower.identity);
    assert.equal((lease.spec as Record<string, unknown>).leaseTransitions, 1);
    // The old leader comes back: it sees another holder and steps down.
    assert.equal(await leader.tryAcquireOrRenew(), false);
    assert.equal(leader.isLeader, false);

    // The new leader stops (shutdown): it releases, and the other takes over at its next attempt.
    follower.start();
    await follower.stop();
    assert.equal(((await server.get('Lease', 'osm-system', 'election'))!.spec as Record<string, unknown>).holderIdentity, undefined);
    clock.t += 1_000;
    assert.equal(await leader.tryAcquireOrRenew(), true, 'a released Lease is taken at once');
    assert.deepEqual(events, [`${leader.identity} leads`, `${follower.identity} leads`, `${leader.identity} stops`, `${follower.identity} stops`, `${leader.identity} leads`]);
  });

  it('steps down when it cannot renew before others may take over', async () => {
    const clock = new ManualClock();
    const a = new LeaderElector({ api: leaseApiFor(kubeConfig), namespace: 'osm-system', name: 'flaky', identity: 'a', timers: clock });
    assert.equal(await a.tryAcquireOrRenew(), true);
    // The fake answers 503; the real server becomes unreachable (connection refused).
    if (fake) fake.failNext(100, 503, (_method, url) => url.includes('/leases'));
    else await server.stop();
    clock.t += 5_000;
    assert.equal(await a.tryAcquireOrRenew(), true, 'one failed renewal is tolerated');
    clock.t += 5_000;
    assert.equal(await a.tryAcquireOrRenew(), false, '10 s without renewal: stepped down');
    if (fake) fake.failNext(0);
    else await server.start();
  });
});
