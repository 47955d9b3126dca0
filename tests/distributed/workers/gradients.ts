/**
 * Worker: gradients through the differentiable collectives.
 * - `worked-example` (docs/design.md contract 3): x = 1, xx = (r+2)·x, s = allReduceSum(xx),
 *   y = (r+2)·s; returns dy/dx (10 / 15 on 2 ranks) and the gradient a raw all-reduce would
 *   give (4 / 9).
 * - `gather`: embeddings E_r = X_r θ, loss_r = rankLoss(E_r, allGather(E_r)); returns
 *   ∂loss/∂E_r through the collective and the DDP-averaged ∂loss/∂θ.
 */
import { initEngine } from '../../../src/core/engine.js';
import { tf, type Tensor } from '../../../src/core/tf.js';
import { allGather, allReduceSum } from '../../../src/distributed/collectives.js';
import { type GatherProblem, problemData, rankLoss } from '../fixtures.js';
import { seededFloats } from '../io.js';
import { type BaseSpec, joinGroup, readArgs, run } from './common.js';

interface GradientSpec extends BaseSpec {
  scenario: 'worked-example' | 'gather';
  problem?: GatherProblem;
}

run(async () => {
  const { spec, rank } = readArgs<GradientSpec>();
  // The engine the mocha setup uses for the one-process reference (tests/setup.ts).
  await initEngine('cpu');
  const group = await joinGroup(spec, rank);
  const c = rank + 2;
  if (spec.scenario === 'worked-example') {
    const x = tf.scalar(1);
    const differentiable = tf.grad((v: Tensor) => tf.mul(c, allReduceSum(tf.mul(c, v), group)))(x);
    // What a raw, non-differentiable all-reduce gives: autograd sees s = xx + constant.
    const raw = tf.grad((v: Tensor) => {
      const xx = tf.mul(c, v);
      const total = Float32Array.from(xx.dataSync());
      group.allReduce(total);
      const s = tf.add(xx, tf.sub(tf.tensor(total, xx.shape), tf.tensor(xx.dataSync(), xx.shape)));
      return tf.mul(c, s);
    })(x);
    const y = tf.mul(c, allReduceSum(tf.mul(c, x), group));
    const result = { grad: differentiable.dataSync()[0], rawGrad: raw.dataSync()[0], y: y.dataSync()[0] };
    group.close();
    return result;
  }
  const p = spec.problem!;
  const { inputs, weights, theta } = problemData(p, seededFloats);
  const X = tf.tensor2d(inputs[rank]!, [p.batch, p.inDim]);
  const w = tf.tensor1d(weights[rank]!);
  const th = tf.tensor2d(theta, [p.inDim, p.outDim]);
  const E = tf.matMul(X, th);
  const lossOf = (e: Tensor) => rankLoss(e, allGather(e, group), rank, group.worldSize, w);
  const before = tf.memory().numTensors;
  const gradE = tf.tidy(() => tf.grad(lossOf)(E));
  const leaked = tf.memory().numTensors - before - 1;
  const gradTheta = tf.grad((t: Tensor) => lossOf(tf.matMul(X, t)))(th);
  // DDP: average parameter gradients over ranks.
  const avgTheta = Float32Array.from(gradTheta.dataSync());
  group.allReduce(avgTheta, 'avg');
  const loss = lossOf(E).dataSync()[0];
  group.close();
  return { gradE: Array.from(gradE.dataSync()), gradTheta: Array.from(avgTheta), loss, leaked };
});
