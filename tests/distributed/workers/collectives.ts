/**
 * Worker: runs every ProcessGroup collective on this rank's inputs (`in-<rank>-<name>.bin`
 * in the spec's dir) and writes each result to `out-<rank>-<name>.bin`. The test computes
 * the expected results from all ranks' inputs.
 */
import { join } from 'node:path';
import { readF32, writeF32 } from '../io.js';
import { type BaseSpec, joinGroup, readArgs, run } from './common.js';

run(async () => {
  const { spec, rank } = readArgs<BaseSpec>();
  const group = await joinGroup(spec, rank);
  const input = (name: string) => readF32(join(spec.dir, `in-${rank}-${name}.bin`));
  const output = (name: string, data: Float32Array) => writeF32(join(spec.dir, `out-${rank}-${name}.bin`), data);
  const W = group.worldSize;

  for (const [name, op] of [
    ['sum', 'sum'],
    ['avg', 'avg'],
    ['max', 'max'],
    ['big', 'sum'],
    ['empty', 'sum'],
  ] as const) {
    const data = input(name);
    group.allReduce(data, op);
    output(name, data);
  }
  output('gather', group.allGather(input('gather')));
  output('rs', group.reduceScatter(input('rs')));
  output('rsbig', group.reduceScatter(input('rsbig')));
  for (const [name, root] of [
    ['bcast', W - 1],
    ['bcast0', 0],
  ] as const) {
    const data = input(name);
    group.broadcast(data, root);
    output(name, data);
  }
  group.barrier();
  const kind = group.constructor.name;
  group.close();
  return { rank: group.rank, worldSize: W, kind };
});
