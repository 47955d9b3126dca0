import { setFlagsFromString } from 'node:v8';

let tuned = false;

/**
 * Turns off V8's concurrent marking for this process, unless `SSL_ZOO_CONCURRENT_MARKING=1`.
 *
 * A training step allocates gigabytes of tensor buffers, and V8 answers external memory
 * pressure with dozens of major collections per step. With concurrent marking, each one
 * runs marker threads beside the main thread; they take cores from the native kernels'
 * threads, and a parallel kernel waits for its slowest thread. Marking on the main thread
 * instead made a `tiny_resnet` SimCLR step about 25% faster on 2 cores (measured in
 * README, "CPU speed"). Set before the heap grows (the CLI does it first thing) it works
 * best; later it still helps. Process-wide and idempotent.
 */
export function tuneGarbageCollector(): void {
  if (tuned || process.env.SSL_ZOO_CONCURRENT_MARKING === '1') return;
  setFlagsFromString('--no-concurrent-marking');
  tuned = true;
}
