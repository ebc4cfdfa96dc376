#!/usr/bin/env node
// The `trellis` command: runs the TypeScript sources through tsx's ESM loader.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../src/cli/main.ts');
await main(process.argv);
