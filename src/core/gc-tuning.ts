import { setFlagsFromString } from 'node:v8';

let tuned = false;

/**
 * Turns off V8's concurrent marking for this process, unless `SSL_ZOO_CONCURRENT_MARKING=1`.
 *
 * A training step allocates gigabytes of tensor buffers, and V8 answers external memory
 * pressure with dozens of major collections per step. With concurrent marking, each one
 * runs marker threads beside the main thread; they take cores from the native kernels'
 * threads, and a parallel kernel waits for its slowest thread. Marking on the main thread
 * instead took a `tiny_resnet` SimCLR trainer step on 2 cores from 1.57 s to 1.07 s
 * (docs/performance.md, "CPU speed"), at the price of some peak memory. Set before the heap grows (the
 * CLI does it first thing) it works best; later it still helps. Process-wide, idempotent.
 */
export function tuneGarbageCollector(): void {
  if (tuned || process.env.SSL_ZOO_CONCURRENT_MARKING === '1') return;
  setFlagsFromString('--no-concurrent-marking');
  tuned = true;
}
