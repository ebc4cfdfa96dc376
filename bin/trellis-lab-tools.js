#!/usr/bin/env node
// `trellis lab app|traffic` without loading the rest of the CLI: what each lab pod runs, so a pod
// starts in a fraction of the time (same commands and flags as `trellis lab app|traffic`).
import { importCompiled } from './compiled.js';

const { labToolsMain } = await importCompiled('cli/lab-tools-main.js');
await labToolsMain(process.argv);
