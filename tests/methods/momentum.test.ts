import { strict as assert } from 'node:assert';
import { createBackbone } from '../../src/backbones/index.js';
import { initEngine } from '../../src/core/engine.js';
import { Rng } from '../../src/core/random.js';
import { tf } from '../../src/core/tf.js';
import { BYOL, cosineTau, mlpHead, MomentumMethod, type MethodContext, type SslLossOutput } from '../../src/methods/index.js';
import { resolveMethodArgs } from '../../src/methods/registry.js';

function smallByol(seed = 1): BYOL {
  return new BYOL({
    createBackbone: (rng) => createBackbone('mlp', { inChannels: 1, imageSize: 8, rng, mlpHidden: [16] }),
    numClasses: 3,
    rng: new Rng(seed),
    args: resolveMethodArgs('byol', { projHiddenDim: 8, projOutputDim: 4, predHiddenDim: 8 }),
  });
}

/** A momentum method as a subclass author writes one: a projector and its EMA copy registered, nothing else called. */
class MinimalMomentum extends MomentumMethod {
  readonly projector;
  readonly momentumProjector;

  constructor(ctx: MethodContext) {
    super(ctx);
    const dims = [this.backbone.featureDim, 8, 4];
    this.projector = this.addModule('projector', mlpHead(dims, { rng: ctx.rng, norm: 'batch' }));
    this.momentumProjector = this.addMomentumProjector(this.projector, mlpHead(dims, { rng: ctx.rng, norm: 'batch' }));
  }

  override embed(features: tf.Tensor[], views: tf.Tensor[]): tf.Tensor[] {
    return [this.projector.forward(features[0]!), this.targetProjection(views[1]!)];
  }

  override embeddingLoss([z, t]: tf.Tensor[]): SslLossOutput {
    return { loss: tf.mean(tf.square(tf.sub(z!, t!))) as tf.Scalar };
  }
}

/** Asserts that `target` holds exactly `online`'s parameters and buffers. */
function assertSameState(online: { stateDict(): Record<string, tf.Tensor> }, target: { stateDict(): Record<string, tf.Tensor> }, what: string): void {
  const [a, b] = [online.stateDict(), target.stateDict()];
  assert.deepEqual(Object.keys(b).sort(), Object.keys(a).sort(), what);
  for (const name of Object.keys(a)) assert.deepEqual(Array.from(b[name]!.dataSync()), Array.from(a[name]!.dataSync()), `${what}: ${name}`);
}

describe('MomentumMethod', () => {
  before(async () => {
    await initEngine('cpu-js');
  });

  it('follows solo-learn tau schedule: base at step 0, final at the end, cosine between', () => {
    assert.equal(cosineTau(0.99, 1, 0, 100), 0.99);
    assert.equal(cosineTau(0.99, 1, 100, 100), 1);
    assert.ok(Math.abs(cosineTau(0.99, 1, 50, 100) - 0.995) < 1e-12);
    const quarter = 1 - (0.01 * (Math.cos(Math.PI / 4) + 1)) / 2;
    assert.ok(Math.abs(cosineTau(0.99, 1, 25, 100) - quarter) < 1e-12);
  });

  it('starts the target as an exact, frozen copy of the online network', () => {
    const m = smallByol();
    const online = m.backbone.stateDict();
    const target = m.momentumBackbone.stateDict();
    for (const name of Object.keys(online)) {
      assert.deepEqual(Array.from(target[name].dataSync()), Array.from(online[name].dataSync()), name);
    }
    const trainable = new Set(m.trainableParameters());
    for (const v of [...m.momentumBackbone.parameters(), ...m.momentumProjector.parameters()]) assert.ok(!trainable.has(v));
    m.dispose();
  });

  it('a subclass that only registers its projector pair gets both targets initialised (exact, frozen copies) with no call of its own', () => {
    const m = new MinimalMomentum({
      createBackbone: (rng) => createBackbone('mlp', { inChannels: 1, imageSize: 8, rng, mlpHidden: [16] }),
      numClasses: 3,
      rng: new Rng(5),
      args: resolveMethodArgs('byol', {}),
    });
    assertSameState(m.backbone, m.momentumBackbone, 'backbone');
    assertSameState(m.projector, m.momentumProjector, 'projector');
    const trainable = new Set(m.trainableParameters());
    for (const v of [...m.momentumBackbone.parameters(), ...m.momentumProjector.parameters()]) assert.ok(!trainable.has(v), v.name);
    m.dispose();
  });

  it('resetTargets copies online weights replaced after construction (a loaded pretrained backbone) into the target', () => {
    const m = smallByol();
    for (const v of m.backbone.parameters()) v.assign(tf.add(v, 0.5));
    m.resetTargets();
    assertSameState(m.backbone, m.momentumBackbone, 'backbone');
    m.dispose();
  });

  it('moves the target by target = tau * target + (1 - tau) * online with the previous step tau', () => {
    const m = smallByol();
    const [name, online] = m.backbone.namedParameters()[0];
    const target = m.momentumBackbone.stateDict()[name] as tf.Variable;
    const before = Float32Array.from(target.dataSync());
    online.assign(tf.add(online, 1));
    const onlineNow = Float32Array.from(online.dataSync());
    m.onTrainBatchEnd({ step: 3, totalSteps: 10, epoch: 0 });
    const tau = cosineTau(0.99, 1, 2, 10);
    const after = target.dataSync();
    for (let i = 0; i < before.length; i++) {
      assert.ok(Math.abs(after[i] - (tau * before[i] + (1 - tau) * onlineNow[i])) < 1e-6);
    }
    assert.ok(Math.abs(m.stepLogs().tau - cosineTau(0.99, 1, 3, 10)) < 1e-12);
    m.dispose();
  });
});
