/**
 * The page's linear probe (examples/browser/linear-probe.ts) written again, without the
 * library's layers, optimizer, schedule or linear-evaluation code, in float64 plain
 * JavaScript: the tests compare the page's probe (and the probe on the library's Node
 * modules) with it. Only the random numbers come from the library's `Rng` (the probe's split,
 * initial weights and batch order are defined by it).
 */
import type { LinearProbeSettings } from '../../examples/browser/linear-probe.js';
import { Rng } from '../../src/core/random.js';

/** What the reference probe measured. */
export interface ReferenceResult {
  train: number[];
  test: number[];
  testAccuracy: number;
  testLoss: number;
  trainAccuracy: number;
  steps: number;
}

/** Softmax probabilities of logits `z`. */
function softmax(z: number[]): number[] {
  const top = Math.max(...z);
  const e = z.map((v) => Math.exp(v - top));
  const sum = e.reduce((a, b) => a + b, 0);
  return e.map((v) => v / sum);
}

/**
 * Multinomial logistic regression of `features` (`[labels.length, dim]`) as the page's probe
 * defines it: each class's positions permuted by `Rng.keyed(seed, c)`, the first half
 * (rounded up) trains and the rest tests; features standardised by the training split's
 * mean and population standard deviation (floored at 1e-6); weights `[dim, K]` then bias
 * `[K]` uniform in ±1/sqrt(dim) from `Rng(seed)`; each epoch the training positions in the
 * order `Rng.keyed(seed, epoch).permutation`, batches of min(batchSize, n) with the last
 * incomplete one dropped; the mean cross-entropy's gradient, PyTorch's SGD with momentum (the
 * first step's buffer is the gradient), lr x (1 + cos(pi k / T)) / 2 at step k of T.
 */
export function referenceLinearProbe(
  features: ArrayLike<number>,
  dim: number,
  labels: ArrayLike<number>,
  numClasses: number,
  s: LinearProbeSettings,
): ReferenceResult {
  const train: number[] = [];
  const test: number[] = [];
  for (let c = 0; c < numClasses; c++) {
    const members = Array.from({ length: labels.length }, (_, i) => i).filter((i) => labels[i] === c);
    const order = Rng.keyed(s.seed, c).permutation(members.length);
    order.forEach((k, at) => (at < Math.ceil(members.length / 2) ? train : test).push(members[k]!));
  }
  train.sort((a, b) => a - b);
  test.sort((a, b) => a - b);
  const mean = new Array<number>(dim).fill(0);
  const std = new Array<number>(dim).fill(0);
  for (const i of train) for (let d = 0; d < dim; d++) mean[d]! += features[i * dim + d]! / train.length;
  for (const i of train) for (let d = 0; d < dim; d++) std[d]! += (features[i * dim + d]! - mean[d]!) ** 2 / train.length;
  const row = (i: number) => Array.from({ length: dim }, (_, d) => (features[i * dim + d]! - mean[d]!) / Math.max(Math.sqrt(std[d]!), 1e-6));
  const x = (rows: number[]) => rows.map(row);
  const [xTrain, xTest] = [x(train), x(test)];

  const rng = new Rng(s.seed);
  const bound = 1 / Math.sqrt(dim);
  const w = Array.from(rng.uniformArray(dim * numClasses, -bound, bound));
  const b = Array.from(rng.uniformArray(numClasses, -bound, bound));
  const logits = (v: number[]) => Array.from({ length: numClasses }, (_, k) => v.reduce((a, xd, d) => a + xd * w[d * numClasses + k]!, b[k]!));

  const batch = Math.min(s.batchSize, train.length);
  const perEpoch = Math.floor(train.length / batch);
  const total = s.epochs * perEpoch;
  const params = [w, b];
  const buffers: Array<number[] | undefined> = [undefined, undefined];
  let step = 0;
  for (let epoch = 0; epoch < s.epochs; epoch++) {
    const order = Rng.keyed(s.seed, epoch).permutation(train.length);
    for (let k = 0; k < perEpoch; k++, step++) {
      const gw = new Array<number>(w.length).fill(0);
      const gb = new Array<number>(b.length).fill(0);
      for (const j of order.slice(k * batch, (k + 1) * batch)) {
        const p = softmax(logits(xTrain[j]!));
        p[labels[train[j]!]!]! -= 1;
        for (let c = 0; c < numClasses; c++) {
          gb[c]! += p[c]! / batch;
          for (let d = 0; d < dim; d++) gw[d * numClasses + c]! += (xTrain[j]![d]! * p[c]!) / batch;
        }
      }
      const lr = (s.lr * (1 + Math.cos((Math.PI * step) / total))) / 2;
      [gw, gb].forEach((g, n) => {
        const param = params[n]!;
        const direction = g.map((v, i) => v + s.weightDecay * param[i]!);
        const buffer = buffers[n] === undefined ? direction : buffers[n]!.map((v, i) => s.momentum * v + direction[i]!);
        buffers[n] = buffer;
        for (let i = 0; i < param.length; i++) param[i]! -= lr * buffer[i]!;
      });
    }
  }
  const score = (rows: number[], xs: number[][]) => {
    let correct = 0;
    let loss = 0;
    rows.forEach((i, n) => {
      const z = logits(xs[n]!);
      if (z.indexOf(Math.max(...z)) === labels[i]) correct++;
      loss -= Math.log(softmax(z)[labels[i]!]!);
    });
    return { accuracy: correct / rows.length, loss: loss / rows.length };
  };
  const scored = score(test, xTest);
  return { train, test, testAccuracy: scored.accuracy, testLoss: scored.loss, trainAccuracy: score(train, xTrain).accuracy, steps: step };
}
