import * as grpc from '@grpc/grpc-js';
import * as xds from '@grpc/grpc-js-xds';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { HELLO_METHOD, HELLO_TARGET, ProxylessMesh, assertSplitScenario, type Outcome } from './helpers/proxyless-mesh.js';

/**
 * grpc-js-xds reads its bootstrap from this channel option when set, so each channel can be a
 * different client identity in one process (the option's name says test only: it is).
 */
const BOOTSTRAP_OPTION = 'grpc.TEST_ONLY_DO_NOT_USE_IN_PROD.xds_bootstrap_config';
const raw = (b: Buffer): Buffer => b;

xds.register();

/** A proxyless grpc-js client of one identity, dialing `xds:///hello.greet:50051`. */
class Client {
  readonly uuid = randomUUID();
  private readonly client: grpc.Client;

  constructor(mesh: ProxylessMesh, namespace: string, serviceAccount: string) {
    this.client = new grpc.Client(HELLO_TARGET, grpc.credentials.createInsecure(), {
      [BOOTSTRAP_OPTION]: JSON.stringify(mesh.bootstrap(namespace, serviceAccount, this.uuid)),
    });
  }

  private call(deadlineMs: number, waitForReady: boolean): Promise<string> {
    return new Promise((resolve, reject) => {
      this.client.makeUnaryRequest(
        HELLO_METHOD,
        raw,
        raw,
        Buffer.alloc(0),
        new grpc.Metadata({ waitForReady }),
        { deadline: Date.now() + deadlineMs },
        (err, reply) => (err ? reject(err) : resolve(reply!.toString())),
      );
    });
  }

  /** Makes `n` RPCs, `concurrency` at a time; counts replies by backend name and errors by status name. */
  async run(n: number, options: { deadlineMs?: number; waitForReady?: boolean; concurrency?: number } = {}): Promise<Outcome> {
    const out: Outcome = { counts: {}, errors: {} };
    let left = n;
    const worker = async (): Promise<void> => {
      while (left > 0) {
        left--;
        try {
          const name = await this.call(options.deadlineMs ?? 5000, options.waitForReady ?? false);
          out.counts[name] = (out.counts[name] ?? 0) + 1;
        } catch (err) {
          const code = grpc.status[(err as grpc.ServiceError).code] ?? String(err);
          out.errors[code] = (out.errors[code] ?? 0) + 1;
        }
      }
    };
    await Promise.all(Array.from({ length: options.concurrency ?? 50 }, worker));
    return out;
  }

  close(): void {
    this.client.close();
  }
}

describe('proxyless gRPC (grpc-js-xds) through the controller', () => {
  let mesh: ProxylessMesh;
  const clients: Client[] = [];

  before(async () => {
    mesh = await ProxylessMesh.start([75, 25]);
  });

  after(async () => {
    for (const c of clients) c.close();
    await mesh.stop();
  });

  function client(namespace: string, serviceAccount: string): Client {
    const c = new Client(mesh, namespace, serviceAccount);
    clients.push(c);
    return c;
  }

  it('loads the mesh without manifest errors or skipped policies', async () => {
    const policies = await mesh.getJson<{ manifestErrors: unknown[]; problems: unknown[] }>('/debug/policies');
    assert.deepEqual(policies.manifestErrors, []);
    assert.deepEqual(policies.problems, []);
  });

  it('splits RPCs by the TrafficSplit, follows a new split, and stops using a removed endpoint', async (t) => {
    const greeter = client('client', 'greeter');
    const removed = await assertSplitScenario(
      mesh,
      {
        first: () => greeter.run(1, { waitForReady: true, deadlineMs: 10_000, concurrency: 1 }),
        run: (n) => greeter.run(n),
        afterInitialSplit: async () => {
          // The client is registered as proxyless, and said so in its node.
          const me = (await mesh.proxies()).find((p) => p.uuid === greeter.uuid);
          assert.equal(me?.clientType, 'grpc');
          // It was sent (and accepted, see the NACK check) the Retry policy on the apex route.
          const dump = await mesh.getJson<{ configs: Record<string, any>[] }>(`/debug/config_dump?proxy=${greeter.uuid}`); // eslint-disable-line @typescript-eslint/no-explicit-any
          const routes = dump.configs.find((c) => String(c['@type']).endsWith('RoutesConfigDump'))!;
          const rds = routes.dynamic_route_configs.find((r: { route_config: { name: string } }) => r.route_config.name === 'rds-outbound.50051').route_config;
          const apex = rds.virtual_hosts.find((v: { domains: string[] }) => v.domains.includes('hello.greet:50051'));
          assert.equal(apex.routes[0].route.retry_policy.num_retries.value, 2);
        },
      },
      t,
    );
    assert.ok((removed.counts['v1-a'] ?? 0) > 0 && (removed.counts['v2-a'] ?? 0) > 0);
  });

  it('fails RPCs of a source without a TrafficTarget with UNAVAILABLE (no route), quickly', async () => {
    const stranger = client('client', 'stranger');
    // Each deadline (10 s) is below grpc-js's 15 s does-not-exist timer: UNAVAILABLE here comes
    // from the configuration the controller sent, not from the client giving up on a listener.
    const outcome = await stranger.run(5, { deadlineMs: 10_000, concurrency: 1 });
    assert.deepEqual(outcome, { counts: {}, errors: { UNAVAILABLE: 5 } });
  });

  it('receives no NACK from either client', async () => {
    assert.deepEqual(await mesh.nacks(), []);
  });
});
