import { Command } from 'commander';
import { registerLabToolCommands } from './lab-tools-command.js';

/**
 * `trellis lab app|traffic` alone (bin/trellis-lab-tools.js): the same commands as the full CLI's,
 * without loading the controller, so a lab pod's app starts fast.
 * @param argv `process.argv` (`node bin/trellis-lab-tools.js lab app …`).
 */
export async function labToolsMain(argv: readonly string[]): Promise<void> {
  const program = new Command('trellis');
  registerLabToolCommands(program.command('lab'));
  await program.parseAsync([...argv]);
}
