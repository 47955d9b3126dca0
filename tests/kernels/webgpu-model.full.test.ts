import assert from 'node:assert/strict';
import { createBackbone, type BackboneOptions } from '../../src/backbones/index.js';
import { Rng } from '../../src/core/random.js';
import { tf } from '../../src/core/tf.js';
import { getMethodClass, resolveMethodArgs } from '../../src/methods/registry.js';
import { useCpu, useWebGpu } from '../helpers/webgpu.js';

/**
 * One SimCLR step (default arguments: a 2048-wide projector, whose input gradient is the
 * product tfjs 4.22's split-K program got wrong) on webgpu and on the cpu engine (its native
 * oneDNN kernels, themselves checked against tfjs's JS kernels in tests/kernels; the JS
 * kernels here took 80 of this file's 137 s), seeded: the loss and the gradient of every
 * trainable parameter. Batch 8 per view, 16x16x1 images.
 *
 * Before the fixes of src/core/kernels/webgpu, tiny_resnet's gradients were 0.97 relative
 * apart (mlp's 0.93) with the loss equal to 2e-7; after, 1.8e-6 (mlp's 9.7e-7).
 */
const BACKBONES: Record<string, Partial<BackboneOptions>> = {
  tiny_resnet: {},
  mlp: {},
};

/** Gradients accumulate rounding through ~20 layers: 1e-5 per tensor, 1e-5 over all of them. */
const PER_TENSOR = 1e-5;
const OVERALL = 1e-5;

interface Step {
  loss: number;
  grads: Map<string, Float32Array>;
}

async function simclrStep(backbone: string): Promise<Step> {
  const B = 8;
  const S = 16;
  const method = new (getMethodClass('simclr'))({
    createBackbone: (rng) => createBackbone(backbone, { inChannels: 1, imageSize: S, rng, ...BACKBONES[backbone] }),
    numClasses: 3,
    rng: new Rng(3),
    args: resolveMethodArgs('simclr', {}),
  });
  const rng = new Rng(11);
  const views = [0, 1].map(() => tf.tensor4d(rng.normalArray(B * S * S), [B, S, S, 1]));
  const labels = tf.tensor1d(
    Array.from({ length: B }, (_, i) => i % 3),
    'int32',
  );
  // The method's loss only: the classifier learns from detached features.
  const named = method.namedParameters().filter(([n, v]) => v.trainable && !n.startsWith('classifier.'));
  const { value, grads } = tf.variableGrads(
    () => {
      const out = method.trainingStep(views, labels);
      const loss = tf.clone(out.metrics.loss) as tf.Scalar;
      tf.dispose([out.loss, ...Object.values(out.metrics)]);
      return loss;
    },
    named.map(([, v]) => v),
  );
  const step: Step = { loss: (await value.data())[0], grads: new Map() };
  for (const [n, v] of named) step.grads.set(n, Float32Array.from(await grads[v.name].data()));
  tf.dispose([value, ...Object.values(grads), ...views, labels]);
  method.dispose();
  return step;
}

describe('kernels/webgpu: one SimCLR step, webgpu vs cpu (slow)', function () {
  // SwiftShader: a minute or more on a loaded 2-core machine.
  this.timeout(900_000);
  const webgpu = new Map<string, Step>();
  const reference = new Map<string, Step>();

  before(async () => {
    await useWebGpu();
    for (const name of Object.keys(BACKBONES)) webgpu.set(name, await simclrStep(name));
    await useCpu();
    for (const name of Object.keys(BACKBONES)) reference.set(name, await simclrStep(name));
  });

  for (const name of Object.keys(BACKBONES)) {
    it(`${name}: the same loss and parameter gradients`, () => {
      const a = webgpu.get(name)!;
      const b = reference.get(name)!;
      assert.ok(Math.abs(a.loss - b.loss) <= 1e-5 * Math.abs(b.loss), `loss ${a.loss} vs ${b.loss}`);
      assert.deepEqual([...a.grads.keys()], [...b.grads.keys()]);
      const sq = (xs: Iterable<[Float32Array, Float32Array]>) => {
        let d = 0;
        let r = 0;
        for (const [w, g] of xs) for (let i = 0; i < g.length; i++) [d, r] = [d + (w[i] - g[i]) ** 2, r + g[i] ** 2];
        return { d, r };
      };
      const pairs = [...b.grads].map(([param, g]) => [param, a.grads.get(param)!, g] as const);
      const all = sq(pairs.map(([, w, g]) => [w, g]));
      const overall = Math.sqrt(all.d / all.r);
      assert.ok(overall <= OVERALL, `gradients ${overall.toExponential(2)} relative apart`);
      // A tensor is judged against its own norm, or 1 % of all gradients' when smaller: the
      // bias of a Linear before a batch norm has a zero gradient (the norm removes it), so
      // both engines return rounding noise there (mlp's fc biases: 1e-4 of the norm).
      const report: string[] = [];
      for (const [param, w, g] of pairs) {
        const { d, r } = sq([[w, g]]);
        const err = Math.sqrt(d) / Math.max(Math.sqrt(r), 1e-2 * Math.sqrt(all.r));
        if (err > PER_TENSOR) report.push(`${param} ${err.toExponential(2)}`);
      }
      assert.deepEqual(report, [], `gradients off by more than ${PER_TENSOR} relative`);
    });
  }
});
