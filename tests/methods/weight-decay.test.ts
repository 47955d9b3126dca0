/** Biases and normalisation weights get no weight decay with every optimizer (SslTask's parameter groups). */
import { strict as assert } from 'node:assert';
import { createBackbone } from '../../src/backbones/index.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { getMethodClass, resolveMethodArgs } from '../../src/methods/registry.js';
import { buildConfig } from '../../src/experiment/config.js';
import { SslTask, type OptimSettings } from '../../src/methods/task.js';
import type { Optimizer } from '../../src/optim/index.js';

function simclr() {
  const cls = getMethodClass('simclr');
  return new cls({
    createBackbone: (rng) => createBackbone('mlp', { inChannels: 1, imageSize: 8, rng, mlpHidden: [16] }),
    numClasses: 3,
    rng: new Rng(3),
    args: resolveMethodArgs('simclr', { projHiddenDim: 8, projOutputDim: 4 }),
  });
}

const SETTINGS: Omit<OptimSettings, 'optimizer' | 'weightDecay'> = {
  lr: 0.5,
  classifierLr: 0.1,
  momentum: 0.9,
  larsEta: 0.02,
  larsClipLr: false,
  warmupEpochs: 0,
  warmupStartLr: 0,
  minLr: 0,
  globalBatch: 256,
};

/** The method's parameters (no classifier) after one optimizer step on fixed random gradients. */
function afterOneStep(
  optimizer: OptimSettings['optimizer'],
  weightDecay: number,
): { params: Map<string, { rank: number; values: Float32Array }>; opt: Optimizer } {
  const method = simclr();
  const task = new SslTask(method, { ...SETTINGS, optimizer, weightDecay });
  const { optimizer: opt, scheduler } = task.configureOptimizers({ totalSteps: 10, stepsPerEpoch: 10 });
  scheduler.apply(0);
  const rng = new Rng(9);
  const grads: Record<string, Tensor> = {};
  for (const [, v] of method.namedParameters()) if (v.trainable) grads[v.name] = tf.tensor(rng.normalArray(v.size), v.shape);
  opt.step(grads);
  tf.dispose(Object.values(grads));
  const params = new Map(
    method
      .namedParameters()
      .filter(([n]) => !n.startsWith('classifier.'))
      .map(([n, v]) => [n, { rank: v.rank, values: Float32Array.from(v.dataSync() as Float32Array) }]),
  );
  method.dispose();
  return { params, opt: opt as Optimizer };
}

describe('weight decay leaves biases and normalisation weights alone, with every optimizer', () => {
  for (const optimizer of ['sgd', 'adamw'] as const) {
    it(`${optimizer}: a method_no_decay group (weight decay 0) holds exactly the biases and norm weights`, () => {
      const { opt } = afterOneStep(optimizer, 0.5);
      assert.deepEqual(
        opt.groups.map((g) => [g.name, g.weightDecay]),
        [
          ['method', 0.5],
          ['method_no_decay', 0],
          ['classifier', 0],
        ],
      );
      const [decayed, noDecay] = opt.groups;
      assert.ok(
        decayed.params.every((p) => p.variable.rank >= 2),
        'method: weights only',
      );
      assert.ok(noDecay.params.length > 0 && noDecay.params.every((p) => p.variable.rank <= 1), 'method_no_decay: biases and norm weights');
      assert.ok(
        noDecay.params.some((p) => /bn|norm/i.test(p.name)),
        `a norm weight is among ${noDecay.params.map((p) => p.name).join(', ')}`,
      );
      opt.dispose();
    });
  }

  for (const optimizer of ['sgd', 'adamw', 'lars'] as const) {
    it(`${optimizer}: one step with weight decay 0.5 moves biases and norm weights exactly as with none, and every weight matrix differently`, () => {
      const decayed = afterOneStep(optimizer, 0.5);
      const plain = afterOneStep(optimizer, 0);
      let vectors = 0;
      let matrices = 0;
      for (const [name, { rank, values }] of decayed.params) {
        const without = plain.params.get(name)!.values;
        if (rank <= 1) {
          vectors++;
          assert.deepEqual(values, without, `${name} (a bias or norm weight): no weight decay`);
        } else {
          matrices++;
          assert.notDeepEqual(values, without, `${name}: decayed`);
        }
      }
      assert.ok(vectors > 0 && matrices > 0);
      decayed.opt.dispose();
      plain.opt.dispose();
    });
  }

  for (const kind of ['sgd', 'lars'] as const) {
    it(`${kind}: --weight-decay-end follows a cosine from --weight-decay over the run's steps in the decayed groups only`, () => {
      const task = new SslTask(simclr(), { ...SETTINGS, optimizer: kind, weightDecay: 0.04, weightDecayEnd: 0.4 });
      const { optimizer, scheduler } = task.configureOptimizers({ totalSteps: 10, stepsPerEpoch: 5 });
      const opt = optimizer as Optimizer;
      const decays = (step: number) => {
        scheduler.apply(step);
        return Object.fromEntries(opt.groups.map((g) => [g.name, g.weightDecay]));
      };
      const expected = (step: number) => 0.4 + 0.5 * (0.04 - 0.4) * (1 + Math.cos((Math.PI * step) / 10));
      for (const step of [0, 3, 5, 9, 10]) {
        const got = decays(step);
        assert.ok(Math.abs(got.method! - expected(step)) < 1e-12, `step ${step}: ${got.method}`);
        assert.equal(got.classifier, 0);
        if ('method_no_decay' in got) assert.equal(got.method_no_decay, 0);
      }
      assert.ok(Math.abs(decays(0).method! - 0.04) < 1e-12);
      assert.ok(Math.abs(decays(10).method! - 0.4) < 1e-12);
      // Without it the weight decay is constant.
      const constant = new SslTask(simclr(), { ...SETTINGS, optimizer: kind, weightDecay: 0.04 }).configureOptimizers({ totalSteps: 10, stepsPerEpoch: 5 });
      constant.scheduler.apply(7);
      assert.equal((constant.optimizer as Optimizer).groups.find((g) => g.name === 'method')!.weightDecay, 0.04);
      opt.dispose();
      constant.optimizer.dispose();
    });
  }

  it('--weight-decay-end is a config option (weight_decay_end), refused below 0', () => {
    assert.equal(buildConfig({ weightDecayEnd: 0.4 }).weightDecayEnd, 0.4);
    assert.equal(buildConfig({}).weightDecayEnd, undefined);
    assert.throws(() => buildConfig({ weightDecayEnd: -1 }), /weight-decay-end|weightDecayEnd/);
  });
});
