// `node --import ./test/helpers/module-resolutions.mjs …`: records every module resolution of the
// process (ESM imports, static and dynamic, and the CommonJS modules they import) to the file named
// by $TRELLIS_MODULE_RESOLUTIONS, one JSON line each ({ specifier, parent, url }).
import { register } from 'node:module';

const file = process.env.TRELLIS_MODULE_RESOLUTIONS;
if (!file) throw new Error('module-resolutions.mjs: set TRELLIS_MODULE_RESOLUTIONS to the file to record to');
register('./module-resolutions-hooks.mjs', import.meta.url, { data: { file } });
