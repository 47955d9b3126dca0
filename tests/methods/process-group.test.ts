import { strict as assert } from 'node:assert';
import { createBackbone } from '../../src/backbones/index.js';
import { initEngine } from '../../src/core/engine.js';
import { recordJobSize, SingleProcessGroup, withProcessGroup, type ProcessGroup } from '../../src/core/process-group.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor, type Tensor2D } from '../../src/core/tf.js';
import { ntXentLoss } from '../../src/losses/index.js';
import { getMethodClass, resolveMethodArgs } from '../../src/methods/registry.js';

/**
 * Rank 0 of a pretend 2-rank group whose other rank holds a copy of this rank's rows: it
 * counts the collectives the losses run on it.
 */
class CountingGroup implements ProcessGroup {
  readonly rank = 0;
  readonly worldSize = 2;
  gathers = 0;
  reductions = 0;
  allGather(data: Float32Array): Float32Array {
    this.gathers++;
    const out = new Float32Array(data.length * 2);
    out.set(data, 0);
    out.set(data, data.length);
    return out;
  }
  allReduce(data: Float32Array): void {
    this.reductions++;
    for (let i = 0; i < data.length; i++) data[i] = data[i]! * 2;
  }
  reduceScatter(data: Float32Array): Float32Array {
    const n = data.length / 2;
    return Float32Array.from(data.subarray(0, n), (v, i) => v + data[n + i]!);
  }
  broadcast(): void {}
  barrier(): void {}
  close(): void {}
}

function method(name: string) {
  const cls = getMethodClass(name);
  return new cls({
    createBackbone: (rng) => createBackbone('mlp', { inChannels: 1, imageSize: 8, rng, mlpHidden: [16] }),
    numClasses: 3,
    rng: new Rng(5),
    args: resolveMethodArgs(name, name === 'byol' ? { projHiddenDim: 8, projOutputDim: 4, predHiddenDim: 8 } : { projHiddenDim: 8, projOutputDim: 4 }),
  });
}

function views(): Tensor[] {
  const rng = new Rng(9);
  return [0, 1].map(() => tf.tensor4d(rng.normalArray(6 * 64), [6, 8, 8, 1]));
}

describe('the process group reaches the losses through setup, not through each method', () => {
  before(async () => {
    await initEngine('cpu-js');
  });
  afterEach(() => recordJobSize(1));

  for (const [name, collective] of [
    ['simclr', 'gathers'],
    ['barlow_twins', 'reductions'],
  ] as const) {
    it(`${name}: the loss inside the training step runs over the group given to setup() (the method passes none)`, () => {
      const m = method(name);
      const group = new CountingGroup();
      m.setup({ group });
      const labels = tf.tensor1d([0, 1, 2, 0, 1, 2], 'int32');
      const out = m.trainingStep(views(), labels);
      assert.ok(group[collective] > 0, `${name} ran no collective on the group`);
      tf.dispose([out.loss, ...Object.values(out.metrics), labels]);
      m.dispose();
    });
  }

  it('in a multi-rank job, a method that was not set up fails loudly instead of training on its local batch', () => {
    const m = method('simclr');
    recordJobSize(2);
    const labels = tf.tensor1d([0, 1, 2, 0, 1, 2], 'int32');
    assert.throws(
      () => m.trainingStep(views(), labels),
      /SimCLR: its loss couples the samples of the batch but the method was not set up with the process group of this 2-rank job/,
    );
    m.setup({ group: new SingleProcessGroup() });
    const out = m.trainingStep(views(), labels); // a group of one, given explicitly: a local loss by choice
    tf.dispose([out.loss, ...Object.values(out.metrics), labels]);
    m.dispose();
  });

  it('in a multi-rank job, a coupled loss called outside a step and without a group is refused; with a group or a scope it runs', () => {
    const z = () => [tf.randomNormal([4, 3], 0, 1, 'float32', 1), tf.randomNormal([4, 3], 0, 1, 'float32', 2)] as Tensor2D[];
    const [a, b] = z();
    recordJobSize(2);
    assert.throws(() => ntXentLoss(a!, b!, { temperature: 0.5 }), /ntXentLoss: called without a process group in a 2-rank job/);
    const single: ProcessGroup = new SingleProcessGroup();
    const explicit = ntXentLoss(a!, b!, { temperature: 0.5 }, single);
    const scoped = withProcessGroup(single, () => ntXentLoss(a!, b!, { temperature: 0.5 }));
    assert.equal(scoped.dataSync()[0], explicit.dataSync()[0]);
    recordJobSize(1);
    assert.equal(ntXentLoss(a!, b!, { temperature: 0.5 }).dataSync()[0], explicit.dataSync()[0], 'one process: no group needed');
    tf.dispose([a!, b!, explicit, scoped]);
  });
});
