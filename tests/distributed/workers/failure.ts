/**
 * Worker: one good all-reduce, then the `victim` rank dies (SIGKILL, like a crash) or
 * stalls (sleeps far past the timeout) while the others enter a second all-reduce, which
 * must throw within the timeout. Exits 1 with the error on stderr (see common.ts).
 */
import { type BaseSpec, clock, joinGroup, readArgs, run } from './common.js';

interface FailureSpec extends BaseSpec {
  victim: number;
  mode: 'die' | 'stall';
  stallMs: number;
}

run(async () => {
  const { spec, rank } = readArgs<FailureSpec>();
  const group = await joinGroup(spec, rank);
  const data = new Float32Array(1000).fill(rank);
  group.allReduce(data);
  if (rank === spec.victim) {
    if (spec.mode === 'die') process.kill(process.pid, 'SIGKILL');
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, spec.stallMs);
  }
  clock.start = Date.now();
  group.allReduce(data);
  return { unexpected: 'the second all-reduce returned' };
});
