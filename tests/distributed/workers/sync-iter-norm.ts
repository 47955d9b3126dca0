/**
 * Worker: SyncIterNorm with W real processes (tests/distributed/sync-iter-norm.test.ts). Every
 * rank builds the same global input `[N, F]` and upstream weights from the seed, takes its
 * rows r·B .. r·B + B − 1, and runs a training forward with loss_r = Σ y_r ⊙ u_r (so Σ_r loss_r
 * is the one-process loss); it returns the output, the input gradient, its local parameter
 * gradients and the running statistics, and as a negative control the output of a plain
 * IterNorm on its own rows.
 */
import { initEngine } from '../../../src/core/engine.js';
import { IterNorm, type IterNormOptions } from '../../../src/core/iter-norm.js';
import { tf, type Tensor } from '../../../src/core/tf.js';
import { SyncIterNorm } from '../../../src/distributed/sync-iter-norm.js';
import { type BaseSpec, joinGroup, readArgs, run } from './common.js';
import { iterNormProblem, type IterNormProblem } from './sync-iter-norm-problem.js';

interface SyncIterNormSpec extends BaseSpec {
  problem: IterNormProblem;
  options: IterNormOptions;
}

export interface SyncIterNormResult {
  y: number[];
  xGrad: number[];
  weightGrad: number[];
  biasGrad: number[];
  runningMean: number[];
  runningWm: number[];
  localY: number[];
}

run(async () => {
  const { spec, rank } = readArgs<SyncIterNormSpec>();
  await initEngine('cpu');
  const group = await joinGroup(spec, rank);
  const { x, upstream } = iterNormProblem(spec.problem);
  const b = spec.problem.batch / spec.worldSize;
  const mine = (t: Tensor) => tf.slice(t, [rank * b, 0], [b, spec.problem.features]);
  const [xr, ur] = [mine(x), mine(upstream)];
  const layer = new SyncIterNorm(spec.problem.features, spec.options, group);
  let y: Tensor | undefined;
  const input = tf.variable(xr);
  const { grads } = tf.variableGrads(() => {
    y = tf.keep(layer.forward(input));
    return tf.sum(tf.mul(y, ur));
  }, [input, layer.weight!, layer.bias!]);
  const local = new IterNorm(spec.problem.features, spec.options);
  const result: SyncIterNormResult = {
    y: Array.from(y!.dataSync()),
    xGrad: Array.from(grads[input.name]!.dataSync()),
    weightGrad: Array.from(grads[layer.weight!.name]!.dataSync()),
    biasGrad: Array.from(grads[layer.bias!.name]!.dataSync()),
    runningMean: Array.from(layer.runningMean.dataSync()),
    runningWm: Array.from(layer.runningWm.dataSync()),
    localY: Array.from(local.forward(xr).dataSync()),
  };
  group.close();
  return result;
});
