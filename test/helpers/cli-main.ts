/**
 * `node --import tsx test/helpers/cli-main.ts ARGS…`: the `trellis` command line run from the
 * sources, without `bin/` (a test that must see which modules the command loads).
 */
import { main } from '../../src/cli/main.js';

await main(process.argv);
