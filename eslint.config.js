import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['node_modules/', 'src/api/generated/', 'bench/results/'] },
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-restricted-imports': [
        'error',
        { patterns: [{ group: ['**/generated/**/*.js'], allowTypeImports: true, message: 'import generated proto types with `import type`' }] },
      ],
    },
  },
  {
    // Generators are pure: what proxies share lives in the GenerationContext (src/envoy/context.ts),
    // what rebuilds reuse in the MeshSnapshotBuilder, what checks remember in the ResourceCheckCache:
    // never in module-level state that two controllers (or a test and its reference) would share.
    // The snapshot cache and ADS server (src/xds) keep theirs on the layer or server that owns it.
    files: ['src/envoy/**/*.ts', 'src/catalog/**/*.ts', 'src/xds/**/*.ts'],
    // A constant table typed ReadonlySet/ReadonlyMap is not state (the type forbids changing it).
    ignores: ['src/**/*.test.ts'],
    rules: {
      'no-restricted-syntax': [
        'error',
        { selector: 'Program > VariableDeclaration[kind=/^(let|var)$/]', message: 'no module-level mutable state in src/envoy, src/catalog or src/xds: keep it in the object that owns it (GenerationContext, MeshSnapshotBuilder, ResourceCheckCache, SharedResourceMap, AdsServer)' },
        {
          selector: "Program > :matches(VariableDeclaration, ExportNamedDeclaration > VariableDeclaration) > VariableDeclarator:not([id.typeAnnotation.typeAnnotation.typeName.name=/^Readonly(Set|Map)$/]) > NewExpression[callee.name=/^(Map|Set|WeakMap|WeakSet|WeakRef)$/]",
          message: 'no module-level caches in src/envoy, src/catalog or src/xds: keep them in the object that owns them (GenerationContext, MeshSnapshotBuilder, ResourceCheckCache, SharedResourceMap, AdsServer)',
        },
      ],
    },
  },
);
