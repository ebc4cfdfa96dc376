import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { podEnvironment } from './lab.js';

describe('podEnvironment', () => {
  it("gives a pod's app PATH, LANG, TZ, HOME=/ and the downward-API names, and none of the supervisor's other variables", () => {
    const env = podEnvironment(
      { name: 'bookbuyer-0', namespace: 'bookbuyer', podIp: '10.244.1.5', serviceAccount: 'bookbuyer' },
      { PATH: '/usr/bin:/bin', LANG: 'C.UTF-8', AWS_SECRET_ACCESS_KEY: 'secret', KUBECONFIG: '/root/.kube/config', HOME: '/root' },
    );
    assert.deepEqual(env, {
      PATH: '/usr/bin:/bin', LANG: 'C.UTF-8', HOME: '/',
      POD_NAME: 'bookbuyer-0', POD_NAMESPACE: 'bookbuyer', POD_IP: '10.244.1.5', SERVICE_ACCOUNT: 'bookbuyer',
    });
  });
});
