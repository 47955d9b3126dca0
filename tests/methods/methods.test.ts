import { strict as assert } from 'node:assert';
import { createBackbone } from '../../src/backbones/index.js';
import { initEngine } from '../../src/core/engine.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { defineArgs, SimCLR } from '../../src/methods/index.js';
import { getMethodClass, methodNames, registerMethod, resolveMethodArgs } from '../../src/methods/registry.js';

const SMALL_ARGS: Record<string, Record<string, number>> = {
  simclr: { projHiddenDim: 8, projOutputDim: 4 },
  barlow_twins: { projHiddenDim: 8, projOutputDim: 4 },
  byol: { projHiddenDim: 8, projOutputDim: 4, predHiddenDim: 8 },
};

function build(name: string, seed = 3) {
  const cls = getMethodClass(name);
  return new cls({
    createBackbone: (rng) => createBackbone('mlp', { inChannels: 1, imageSize: 8, rng, mlpHidden: [16] }),
    numClasses: 3,
    rng: new Rng(seed),
    args: resolveMethodArgs(name, SMALL_ARGS[name] ?? {}),
  });
}

function batch(seed: number): { views: Tensor[]; labels: Tensor } {
  const rng = new Rng(seed);
  return {
    views: [0, 1].map(() => tf.tensor4d(rng.normalArray(6 * 64), [6, 8, 8, 1])),
    labels: tf.tensor1d([0, 1, 2, 0, 1, 2], 'int32'),
  };
}

describe('methods', () => {
  before(async () => {
    await initEngine('cpu-js');
  });

  for (const name of ['simclr', 'barlow_twins', 'byol']) {
    it(`${name}: the classifier learns from detached features only`, () => {
      const m = build(name);
      const { views, labels } = batch(7);
      const backboneVars = m.backbone.parameters();
      const classifierVars = m.classifier.parameters();
      // Gradient of the total loss vs of the method loss alone (metrics.loss): identical on
      // the backbone, so the classifier's cross-entropy sends nothing into it.
      const total = tf.variableGrads(() => {
        const out = m.trainingStep(views, labels);
        tf.dispose(Object.values(out.metrics));
        return out.loss;
      }, [...backboneVars, ...classifierVars]);
      const sslOnly = tf.variableGrads(() => {
        const out = m.trainingStep(views, labels);
        const loss = tf.clone(out.metrics.loss);
        tf.dispose(Object.values(out.metrics));
        return loss as tf.Scalar;
      }, backboneVars);
      for (const v of backboneVars) {
        const a = total.grads[v.name].dataSync();
        const b = sslOnly.grads[v.name].dataSync();
        let maxAbs = 0;
        for (let i = 0; i < a.length; i++) maxAbs = Math.max(maxAbs, Math.abs(a[i] - b[i]));
        assert.ok(maxAbs < 1e-6, `${v.name}: classifier gradient leaked into the backbone (${maxAbs})`);
      }
      for (const v of classifierVars) {
        assert.ok(tf.norm(total.grads[v.name]).dataSync()[0] > 0, 'classifier gets a gradient');
      }
      tf.dispose([total.value, sslOnly.value, ...Object.values(total.grads), ...Object.values(sslOnly.grads), ...views, labels]);
      m.dispose();
    });
  }

  it('registers user subclasses under new names and rejects unknown ones clearly', () => {
    class MySimCLR extends SimCLR {
      static override readonly args = defineArgs({ ...SimCLR.args, temperature: { ...SimCLR.args.temperature, default: 0.5 } });
    }
    registerMethod('my_simclr', MySimCLR);
    assert.ok(methodNames().includes('my_simclr'));
    assert.equal(resolveMethodArgs('my_simclr', {}).temperature, 0.5);
    assert.throws(() => getMethodClass('nope'), /method: "nope" is not allowed; expected one of .*simclr/);
    assert.throws(() => resolveMethodArgs('simclr', { lambd: 1 }), /method_args.lambd: not a hyperparameter of method 'simclr'/);
  });
});
