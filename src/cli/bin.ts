#!/usr/bin/env node
import { tuneGarbageCollector } from '../core/gc-tuning.js';

// Before the program's modules load (hence the dynamic import): see tuneGarbageCollector.
tuneGarbageCollector();
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
