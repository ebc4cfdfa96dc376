#!/usr/bin/env node
// `trellis lab app|traffic` without loading the rest of the CLI: what each lab pod runs, so a pod
// starts in a fraction of the time (same commands and flags as `trellis lab app|traffic`).
import { register } from 'tsx/esm/api';

register();
const { labToolsMain } = await import('../src/cli/lab-tools-main.ts');
await labToolsMain(process.argv);
