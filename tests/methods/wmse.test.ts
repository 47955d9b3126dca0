import { strict as assert } from 'node:assert';
import { createBackbone } from '../../src/backbones/index.js';
import { UserError } from '../../src/core/errors.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor, type Tensor2D } from '../../src/core/tf.js';
import { simclrViews, viewsFor } from '../../src/data/augment/recipes.js';
import { syntheticDataset } from '../../src/data/synthetic.js';
import { wmseLoss } from '../../src/losses/index.js';
import { WMSE } from '../../src/methods/index.js';
import { describeMethods, getMethodClass, methodNames, resolveMethodArgs } from '../../src/methods/registry.js';

const SMALL = { projHiddenDim: 8, projOutputDim: 3, whiteningSize: 6 };

function build(args: Record<string, number> = SMALL, seed = 3): WMSE {
  return new WMSE({
    createBackbone: (rng) => createBackbone('mlp', { inChannels: 1, imageSize: 8, rng, mlpHidden: [16] }),
    numClasses: 3,
    rng: new Rng(seed),
    args: resolveMethodArgs('wmse', args),
  });
}

/** Two views' embeddings `[n, d]` (fixed random values). */
function embeddings(seed: number, n = 12, d = 3): Tensor2D[] {
  const rng = new Rng(seed);
  return [0, 1].map(() => tf.tensor2d(rng.normalArray(n * d), [n, d]));
}

/** The method's loss on `views` (one loss call). */
function lossOf(m: WMSE, views: Tensor[]): number {
  return tf.tidy(() => m.embeddingLoss(views).loss.dataSync()[0]!);
}

/** The permutation seed the method keys its draws with (private: read for the tests). */
const seedOf = (m: WMSE) => (m as unknown as { permutationSeed: number }).permutationSeed;

/** Rows of `x` in the order `order` (row i = x[order[i]]). */
const reorder = (x: Tensor2D, order: Int32Array) => tf.gather(x, tf.tensor1d(order, 'int32')) as Tensor2D;

describe('method wmse', () => {
  it("is registered with solo-learn's CIFAR recipe: projector 1024-64, whitening size 128, 1 iteration, eps 0, AdamW lr 2e-3, SimCLR's views", () => {
    assert.ok(methodNames().includes('wmse'));
    assert.equal(getMethodClass('wmse'), WMSE);
    assert.deepEqual(resolveMethodArgs('wmse', {}), { projHiddenDim: 1024, projOutputDim: 64, whiteningSize: 128, whiteningIters: 1, whiteningEps: 0 });
    assert.deepEqual(WMSE.optimDefaults, { optimizer: 'adamw', lr: 2e-3, classifierLr: 3e-3, weightDecay: 1e-6 });
    const cifarLike = syntheticDataset({ split: 'train', size: 4, imageSize: 32, channels: 3 });
    assert.deepEqual(viewsFor(WMSE.viewRecipe, cifarLike), simclrViews(cifarLike));
    assert.deepEqual([simclrViews(cifarLike)[0]!.brightness, simclrViews(cifarLike)[0]!.hue, simclrViews(cifarLike)[0]!.solarizationProb], [0.8, 0.2, 0]);
    assert.match(WMSE.paper, /^Ermolov et al\. 2021, "Whitening for Self-Supervised/);
    assert.match(describeMethods(['wmse']), /whiteningSize/);
    assert.throws(() => resolveMethodArgs('wmse', { whiteningEps: 1 }), /method_args\.whiteningEps: 1 is not allowed; expected a number in \[0, 1\)/);
    assert.throws(() => resolveMethodArgs('wmse', { whiteningSize: 1 }), /method_args\.whiteningSize.*>= 2/);
  });

  it('has a projector Linear-BN-ReLU-Linear', () => {
    const m = build();
    assert.deepEqual(
      m.projector.namedChildren().map(([, l]) => l.constructor.name),
      ['Linear', 'BatchNorm', 'ReLU', 'Linear'],
    );
    m.dispose();
  });

  it('loss call k is wmseLoss with the permutations keyed by (seed, k); the call count is a buffer, so a restored state draws what the run would have', () => {
    const m = build({ ...SMALL, whiteningIters: 2 });
    const z = embeddings(5);
    const expected = (call: number) =>
      tf.tidy(() => {
        const rng = Rng.keyed(seedOf(m), call);
        const permutations = [rng.permutation(12), rng.permutation(12)];
        return wmseLoss(z, { whiteningSize: 6, permutations }).dataSync()[0]!;
      });
    const losses = [0, 1, 2].map(() => lossOf(m, z));
    losses.forEach((l, k) => assert.ok(Math.abs(l - expected(k)) <= 1e-6 * Math.abs(l), `call ${k}: ${l} vs ${expected(k)}`));
    // Negative control: the permutation changes with the call count, and so does the loss.
    assert.ok(Math.abs(losses[0]! - losses[1]!) > 1e-4, `${losses[0]} vs ${losses[1]}`);
    assert.deepEqual(Array.from(m.stateDict()['lossCalls']!.dataSync()), [3]);
    // A method restored from the state after 2 calls draws the third permutation next.
    const after2 = build({ ...SMALL, whiteningIters: 2 });
    lossOf(after2, z);
    lossOf(after2, z);
    const resumed = build({ ...SMALL, whiteningIters: 2 });
    resumed.loadStateDict(after2.stateDict());
    assert.equal(lossOf(resumed, z), losses[2]);
    // The same seed gives the same draws (every rank builds its method from the same seed).
    assert.equal(seedOf(build()), seedOf(build()));
    tf.dispose(z);
    for (const x of [m, after2, resumed]) x.dispose();
  });

  it('a whitening size that does not divide the global batch: its largest divisor below is used, said once per process', () => {
    const m = build({ ...SMALL, whiteningSize: 5 }); // N = 12: sub-batches of 4
    const z = embeddings(6);
    const warnings: string[] = [];
    const warn = console.warn;
    console.warn = (msg: string) => warnings.push(msg);
    let losses: number[];
    try {
      losses = [lossOf(m, z), lossOf(m, z), lossOf(build({ ...SMALL, whiteningSize: 5 }), z)];
    } finally {
      console.warn = warn;
    }
    assert.deepEqual(warnings, ["ssl-train: note: wmse's whitening size 5 does not divide the global batch of 12; whitening sub-batches of 4 rows instead"]);
    const want = tf.tidy(() => wmseLoss(z, { whiteningSize: 4, permutations: [Rng.keyed(seedOf(m), 0).permutation(12)] }).dataSync()[0]!);
    assert.ok(Math.abs(losses[0]! - want) <= 1e-6 * Math.abs(want), `${losses[0]} vs ${want}`);
    tf.dispose(z);
    m.dispose();
  });

  it('refuses a whitening size that leaves sub-batches of at most D rows (eps 0), naming the field', () => {
    const m = build({ ...SMALL, whiteningSize: 3 }); // D = 3
    const z = embeddings(7);
    assert.throws(
      () => lossOf(m, z),
      (e: unknown) => e instanceof UserError && /^whiteningSize: 3 is not allowed; expected more than D = 3 rows/.test(e.message),
    );
    tf.dispose(z);
    m.dispose();
  });

  it("presentSampleOrders: a batch in another sample order gets the same sub-batches of samples (verify's twins); without it the loss differs", () => {
    const z = embeddings(8);
    const order = Rng.keyed(99).permutation(12);
    const shuffled = z.map((x) => reorder(x, order));
    const reference = lossOf(build(), z);
    const twin = build();
    twin.presentSampleOrders([order]);
    const twinLoss = lossOf(twin, shuffled);
    assert.ok(Math.abs(twinLoss - reference) <= 1e-5 * Math.abs(reference), `${twinLoss} vs ${reference}`);
    // Negative control: the same reordered batch without the announcement whitens other sub-batches.
    const unannounced = lossOf(build(), shuffled);
    assert.ok(Math.abs(unannounced - reference) > 1e-4, `${unannounced} vs ${reference}`);
    // The announcement is used once: the next call draws in batch positions again.
    assert.equal(
      lossOf(twin, z),
      lossOf(
        (() => {
          const m = build();
          lossOf(m, z);
          return m;
        })(),
        z,
      ),
    );
    tf.dispose([...z, ...shuffled]);
    twin.dispose();
  });

  it('one training step: a finite loss, gradients reach the backbone and the projector, no tensors leak', () => {
    const m = build();
    const rng = new Rng(4);
    const views = [0, 1].map(() => tf.tensor4d(rng.normalArray(12 * 64), [12, 8, 8, 1]));
    const labels = tf.tensor1d([0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2], 'int32');
    const named = m.parameterGroups()[0]!.params;
    const run = () =>
      tf.variableGrads(
        () => {
          const out = m.trainingStep(views, labels);
          tf.dispose(Object.values(out.metrics));
          return out.loss;
        },
        named.map(([, v]) => v),
      );
    tf.dispose(Object.values(run().grads));
    const before = tf.memory().numTensors;
    const { value, grads } = run();
    assert.ok(Number.isFinite(value.dataSync()[0]!));
    const learning = named.filter(([n, v]) => /weight$/.test(n) && tf.tidy(() => tf.norm(grads[v.name]!).dataSync()[0]!) > 0).map(([n]) => n);
    assert.ok(learning.some((n) => n.startsWith('backbone')) && learning.some((n) => n.startsWith('projector')), learning.join(', '));
    tf.dispose([value, ...Object.values(grads)]);
    assert.equal(tf.memory().numTensors, before);
    tf.dispose([...views, labels]);
    m.dispose();
  });
});
