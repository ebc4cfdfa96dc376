import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { TypeUrl } from '../src/api/type-urls.js';
import { parseCommonName } from '../src/proxy/types.js';
import { resourceNames, type AdsTestStream } from './helpers/ads-client.js';
import { snapshot, startAdsHarness, type AdsHarness } from './helpers/ads-harness.js';
import { eventually } from './helpers/wait.js';

const { Cluster: CDS, Listener: LDS } = TypeUrl;

describe('ADS server with a send budget of one byte (every response waits for the previous one to flush)', () => {
  let h: AdsHarness<AdsTestStream, [nodeId?: string]>;
  const nodeIds = Array.from({ length: 8 }, (_, i) => `6ba7b810-9dad-11d1-80b4-00c04fd4300${i}.sidecar.sa${i}.ns${i}.cluster.local`);

  before(async () => {
    h = await startAdsHarness((client, nodeId?: string) => client.openStream(nodeId), undefined, { maxBytesInFlight: 1 });
    for (const [i, id] of nodeIds.entries()) {
      h.cache.setSnapshot(parseCommonName(id).uuid, snapshot({ clusters: { [`c${i}`]: 1, shared: 2 }, listeners: { [`l${i}`]: 1 } }));
    }
  });
  after(async () => {
    h.client.close();
    await h.server.stop(1000);
  });

  it('still serves every stream its own complete configuration, and nothing stays in flight', async () => {
    const streams = nodeIds.map((id) => h.open(id));
    for (const s of streams) {
      s.request(CDS);
      s.request(LDS);
    }
    for (const [i, s] of streams.entries()) {
      const cds = await s.waitFor((r) => r.type_url === CDS);
      const lds = await s.waitFor((r) => r.type_url === LDS);
      assert.deepEqual(resourceNames(cds).sort(), [`c${i}`, 'shared']);
      assert.deepEqual(resourceNames(lds), [`l${i}`]);
    }
    const inFlight = async () => (await h.registry.getMetricsAsJSON()).find((m) => m.name === 'trellis_xds_send_bytes_in_flight')!.values[0].value;
    await eventually(async () => (await inFlight()) === 0, 'every grant given back');
  });
});
