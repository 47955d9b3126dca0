#!/usr/bin/env node
import { tuneGarbageCollector } from '../core/gc-tuning.js';

// Before the program's modules load (hence the dynamic import): see tuneGarbageCollector.
tuneGarbageCollector();
// SIGUSR1 (Slurm's --signal default) would start Node's inspector and leave the process
// running. Until a run's stop handlers are installed (src/trainer/stop-signal.ts), it ends the
// process by its default action, as SIGTERM does; with them, they decide.
const endOnUsr1 = (): void => {
  if (process.listenerCount('SIGUSR1') > 1) return;
  process.off('SIGUSR1', endOnUsr1);
  process.kill(process.pid, 'SIGUSR1');
};
process.on('SIGUSR1', endOnUsr1);
const { main } = await import('./main.js');
const code = await main(process.argv.slice(2));
const { engineInfo } = await import('../core/engine.js');
if (engineInfo()?.backend === 'webgpu') {
  // Dawn's device keeps the event loop alive (and destroying it waits for queued GPU work,
  // which after a failed step may never finish): exit once the output is flushed.
  await new Promise<void>((resolve) => process.stdout.write('', () => process.stderr.write('', () => resolve())));
  process.exit(code);
}
process.exitCode = code;
