/**
 * Import boundaries of Trellis (see DESIGN.md, "What may import what").
 * Runs with `npm test` (`npm run depcheck`).
 */
module.exports = {
  forbidden: [
    { name: 'api-imports-nothing-of-ours', severity: 'error',
      from: { path: '^src/api/' }, to: { path: '^src/', pathNot: '^src/api/' } },
    { name: 'xds-not-catalog-or-envoy', severity: 'error',
      from: { path: '^src/xds/' }, to: { path: '^src/(catalog|envoy|sources|store|certificate)/' } },
    { name: 'envoy-generators-no-io', severity: 'error',
      from: { path: '^src/envoy/' }, to: { path: '^src/(xds|sources|store|certificate|controller|debug|cli)/|^(fs|node:fs|net|node:net|http|node:http|child_process|node:child_process)$' } },
    { name: 'catalog-not-sources', severity: 'error',
      from: { path: '^src/catalog/' }, to: { path: '^src/(sources|xds|envoy|certificate|controller|debug|cli)/' } },
    { name: 'sources-never-generators', severity: 'error',
      from: { path: '^src/(sources|certificate)/' }, to: { path: '^src/(envoy|xds|catalog|controller)/' } },
    { name: 'only-composition-root-wires', severity: 'error',
      from: { path: '^src/', pathNot: '^src/(main|controller/|cli/)' }, to: { path: '^src/(controller/|main)' } },
    { name: 'no-circular', severity: 'error', from: {}, to: { circular: true } },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '(^src/api/generated/|\\.test\\.ts$)' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
  },
};
