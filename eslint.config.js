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
    // never in module-level state that two controllers (or a test and its reference) would share.
    files: ['src/envoy/**/*.ts'],
    ignores: ['src/envoy/validate/**', 'src/envoy/**/*.test.ts'],
    rules: {
      'no-restricted-syntax': [
        'error',
        { selector: 'Program > VariableDeclaration[kind=/^(let|var)$/]', message: 'no module-level mutable state in src/envoy: keep it in the GenerationContext' },
        {
          selector: "Program > :matches(VariableDeclaration, ExportNamedDeclaration > VariableDeclaration) > VariableDeclarator > NewExpression[callee.name=/^(Map|Set|WeakMap|WeakSet|WeakRef)$/]",
          message: 'no module-level caches in src/envoy: keep them in the GenerationContext',
        },
      ],
    },
  },
);
