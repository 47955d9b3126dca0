/**
 * The training page's linear probe (examples/browser/linear-probe.ts) on the library's Node
 * modules (the page runs the same code on the bundle: page.full.test.ts): its split, its
 * accuracy where the answer is known, and its figures against a float64 re-implementation
 * that shares none of its training code (page-probe-reference.ts).
 */
import { strict as assert } from 'node:assert';
import * as zoo from '../../src/browser.js';
import { LINEAR_PROBE_DEFAULTS, linearProbe, probeSplit } from '../../examples/browser/linear-probe.js';
import { referenceLinearProbe } from './page-probe-reference.js';

/** `perClass` points of each of `numClasses` classes in `dim` dimensions: class c around c x `spread` on every axis, plus unit Gaussian noise. */
function clusters(numClasses: number, perClass: number, dim: number, spread: number, seed: number) {
  const rng = new zoo.Rng(seed);
  const labels = Int32Array.from({ length: numClasses * perClass }, (_, i) => i % numClasses);
  const values = Float32Array.from({ length: labels.length * dim }, (_, j) => labels[Math.floor(j / dim)]! * spread + rng.normal());
  return { values, labels };
}

describe("the training page's linear probe", () => {
  it('splits each class in a seeded half that trains (rounded up) and a half that tests', () => {
    const labels = Int32Array.from([0, 1, 2, 0, 1, 0, 1, 0, 1, 1, 0]);
    const split = probeSplit(zoo, labels, 3, 7);
    assert.deepEqual(
      [...split.train, ...split.test].sort((a, b) => a - b),
      Array.from(labels.keys()),
    );
    const count = (rows: Int32Array, c: number) => rows.filter((i) => labels[i] === c).length;
    assert.deepEqual(
      [0, 1, 2].map((c) => [count(split.train, c), count(split.test, c)]),
      [
        [3, 2],
        [3, 2],
        [1, 0],
      ],
    );
    assert.deepEqual(probeSplit(zoo, labels, 3, 7), split, 'the same seed, the same split');
    const others = [8, 9, 10, 11].map((seed) => probeSplit(zoo, labels, 3, seed).train.join());
    assert.ok(
      others.some((train) => train !== split.train.join()),
      'another seed draws another split',
    );
  });

  it('classifies separable clusters without error', async () => {
    const { values, labels } = clusters(3, 12, 6, 4, 1);
    const result = await linearProbe(zoo, { values, dim: 6 }, labels, 3, { ...LINEAR_PROBE_DEFAULTS, seed: 2 });
    assert.deepEqual([result.trainImages, result.testImages, result.steps, result.batchSize], [18, 18, 100, 18]);
    assert.equal(result.testAccuracy, 1);
    assert.equal(result.trainAccuracy, 1);
    assert.ok(result.testLoss < 0.1, `test loss ${result.testLoss}`);
  });

  it("gives the float64 reference's accuracies and test loss on overlapping classes (several batches an epoch, weight decay)", async () => {
    const { values, labels } = clusters(3, 14, 10, 0.6, 3);
    const settings = { seed: 4, epochs: 30, batchSize: 8, lr: 0.2, momentum: 0.9, weightDecay: 1e-3 };
    const result = await linearProbe(zoo, { values, dim: 10 }, labels, 3, settings);
    const expected = referenceLinearProbe(values, 10, labels, 3, settings);
    assert.equal(result.steps, expected.steps);
    assert.equal(expected.steps, 30 * 2, '21 training images: 2 batches of 8 an epoch, the last 5 dropped');
    assert.ok(expected.testAccuracy > 0.4 && expected.testAccuracy < 1, `a probe with something to get wrong: ${expected.testAccuracy}`);
    assert.equal(result.testAccuracy, expected.testAccuracy);
    assert.equal(result.trainAccuracy, expected.trainAccuracy);
    assert.ok(Math.abs(result.testLoss - expected.testLoss) <= 1e-4 * expected.testLoss, `test loss ${result.testLoss}, reference ${expected.testLoss}`);
  });

  it('refuses labels with no class of two images in one line', async () => {
    await assert.rejects(
      linearProbe(zoo, { values: new Float32Array(4), dim: 2 }, Int32Array.from([0, 1]), 2, { ...LINEAR_PROBE_DEFAULTS, seed: 0 }),
      (e: Error) => e instanceof zoo.UserError && /^the linear probe needs a class with two or more images/.test(e.message),
    );
  });
});
