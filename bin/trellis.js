#!/usr/bin/env node
// The `trellis` command: the CLI compiled into dist/ (`npm run build`).
import { importCompiled } from './compiled.js';

const { main } = await importCompiled('cli/main.js');
await main(process.argv);
