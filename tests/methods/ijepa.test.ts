/**
 * I-JEPA on one process: its defaults (the reference's masks, the predictor of its
 * `init_model` scaled to ViT-Tiny), the multi-block masks (the reference's block sizes, keyed
 * per sample whatever its batch, contexts of exactly `contextPatches` outside the targets), the
 * predictor (shapes, fixed sin-cos positions, learned mask token), a step's loss as the
 * per-block computation gives it, the EMA target encoder as the only state, and the ViT-only
 * and context-size checks. (Against PyTorch: tests/losses/cases.test.ts; W ranks:
 * tests/distributed/zoo-exactness.full.test.ts.)
 */
import { strict as assert } from 'node:assert';
import { createBackbone } from '../../src/backbones/index.js';
import { UserError } from '../../src/core/errors.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { ijepaLoss } from '../../src/losses/index.js';
import type { MethodArgs } from '../../src/methods/base.js';
import { IJEPA } from '../../src/methods/ijepa.js';
import { blockSize, multiBlockMasks, type MultiBlockOptions } from '../../src/methods/ijepa-masking.js';
import { sinCosPositionEmbedding } from '../../src/methods/mae-decoder.js';
import { getMethodClass, resolveMethodArgs } from '../../src/methods/registry.js';
import { SingleDeviceStrategy } from '../../src/trainer/strategy.js';

const SIZE = 16; // 4x4 patches of 4 px
const SMALL = { predictorEmbedDim: 12, predictorDepth: 1, contextPatches: 4 };

function build(args: MethodArgs = {}, backbone = 'vit_tiny'): IJEPA {
  const m = new (getMethodClass('ijepa'))({
    createBackbone: (rng) => createBackbone(backbone, { inChannels: 1, imageSize: SIZE, rng, mlpHidden: [8] }),
    numClasses: 3,
    rng: new Rng(5),
    args: resolveMethodArgs('ijepa', { ...SMALL, ...args }),
  }) as IJEPA;
  m.setup({ group: new SingleDeviceStrategy().group });
  return m;
}

/** The defaults' masks on the 8x8 grid of 32 px images. */
const GRID8: MultiBlockOptions = {
  gridSize: 8,
  numTargets: 4,
  targetScale: [0.15, 0.2],
  targetAspect: [0.75, 1.5],
  contextScale: [0.85, 1],
  contextPatches: 11,
};

const close = (a: number, b: number, rel = 1e-5) => Math.abs(a - b) <= rel * Math.max(Math.abs(a), Math.abs(b), 1e-6);

describe('I-JEPA', () => {
  it("defaults: the reference's masks (4 targets of 0.15-0.2, aspect 0.75-1.5, context 0.85-1), predictor 96 x 6, smooth-L1, EMA 0.996 -> 1, AdamW", () => {
    const d = resolveMethodArgs('ijepa', {});
    assert.deepEqual(
      [d.numTargets, d.targetScaleMin, d.targetScaleMax, d.targetAspectMin, d.targetAspectMax, d.contextScaleMin, d.contextScaleMax, d.contextPatches],
      [4, 0.15, 0.2, 0.75, 1.5, 0.85, 1, 11],
    );
    assert.deepEqual([d.predictorEmbedDim, d.predictorDepth, d.predictorNumHeads, d.distance, d.baseTau, d.finalTau], [96, 6, 3, 'smooth_l1', 0.996, 1]);
    assert.deepEqual(IJEPA.optimDefaults, { optimizer: 'adamw', lr: 1.25e-4, classifierLr: 1e-3, weightDecay: 0.04 });
    assert.deepEqual([IJEPA.crops.globalCrops, IJEPA.crops.multiCrop, IJEPA.viewRecipe, IJEPA.defaultBackbone], [1, false, 'reconstruction', 'vit_tiny']);
  });

  it("block sizes are the reference's _sample_block_size (one draw sets area and aspect): 7x7 and 8x8 grids", () => {
    // Values of the reference's formula in Python (int, round, then below the grid side).
    const target = (u: number, g: number) => blockSize(u, g, [0.15, 0.2], [0.75, 1.5]);
    assert.deepEqual(
      [target(0, 7), target(0.5, 7), target(0.999, 7)],
      [
        [2, 3],
        [3, 3],
        [4, 2],
      ],
    );
    assert.deepEqual(
      [target(0, 8), target(0.5, 8), target(0.999, 8)],
      [
        [3, 3],
        [4, 3],
        [4, 3],
      ],
    );
    assert.deepEqual(
      [blockSize(0, 7, [0.85, 1], [1, 1]), blockSize(0.999, 8, [0.85, 1], [1, 1])],
      [
        [6, 6],
        [7, 7],
      ],
    );
  });

  it('masks: target blocks are rectangles of one size per sample; the context keeps exactly contextPatches patches, outside the targets', () => {
    const samples = { seed: 1, epoch: 0, indices: Int32Array.from({ length: 64 }, (_, i) => i) };
    const m = multiBlockMasks(samples, GRID8);
    assert.equal(m.context.length, 64 * 11);
    let relaxed = 0;
    for (let s = 0; s < 64; s++) {
      const size = m.targetSize[s]!;
      assert.ok(size === 9 || size === 12, `target block of ${size} patches`);
      const targets = m.targets[s]!;
      assert.equal(targets.length, 4 * size);
      for (let t = 0; t < 4; t++) {
        const patches: number[] = Array.from(targets.subarray(t * size, (t + 1) * size));
        const rows = patches.map((p) => Math.floor(p / 8));
        const cols = patches.map((p) => p % 8);
        const [h, w] = [Math.max(...rows) - Math.min(...rows) + 1, Math.max(...cols) - Math.min(...cols) + 1];
        assert.equal(h * w, size, 'a full rectangle');
        assert.ok(Math.max(...rows) < 8 && Math.max(...cols) < 8);
      }
      const context = [...m.context.subarray(s * 11, (s + 1) * 11)];
      assert.deepEqual(
        context,
        [...context].sort((a, b) => a - b),
        'row-major',
      );
      assert.equal(new Set(context).size, 11);
      if (context.some((p) => targets.includes(p))) relaxed++;
    }
    // The reference's relaxation (a target stops constraining after 20 failed draws) is rare at these settings.
    assert.ok(relaxed <= 6, `${relaxed} of 64 contexts overlap a target`);
  });

  it("masks: a sample's are the same whatever its batch and position; another epoch, seed, sample or view gives others", () => {
    const of = (seed: number, epoch: number, indices: number[], row: number, view = 0) => {
      const m = multiBlockMasks({ seed, epoch, indices: Int32Array.from(indices) }, GRID8, view);
      return [[...m.context.subarray(row * 11, (row + 1) * 11)], [...m.targets[row]!]];
    };
    const alone = of(1, 3, [7], 0);
    assert.deepEqual(of(1, 3, [11, 2, 7], 2), alone);
    assert.deepEqual(of(1, 3, [7, 0], 0), alone);
    for (const other of [of(1, 4, [7], 0), of(2, 3, [7], 0), of(1, 3, [8], 0), of(1, 3, [7], 0, 1)]) assert.notDeepEqual(other, alone);
  });

  it('predictor: [R, K, F] context -> [R, T, F]; fixed sin-cos positions (a buffer), a learned mask token; state = encoder, EMA target, predictor, classifier', () => {
    const m = build();
    const p = m.predictor;
    const pos = p.posEmbed.dataSync();
    assert.deepEqual(Array.from(pos), Array.from(sinCosPositionEmbedding(12, 4).subarray(12)));
    assert.ok(!p.trainableParameters().includes(p.posEmbed) && p.trainableParameters().includes(p.maskToken));
    const ctx = tf.randomNormal([2, 3, 192]);
    const out = p.predict(ctx, Int32Array.of(0, 1, 2, 5, 6, 7), Int32Array.of(8, 9, 12, 13));
    assert.deepEqual(out.shape, [2, 2, 192]);
    const modules = new Set(Object.keys(m.stateDict()).map((k) => k.split('.')[0]));
    assert.deepEqual([...modules].sort(), ['backbone', 'classifier', 'momentumBackbone', 'predictor']);
    tf.dispose([ctx, out]);
    m.dispose();
  });

  it("a step's loss is ijepaLoss of every target block predicted on its own (the step's grouping by block size changes nothing); the target encoder moves after the step", () => {
    const m = build({ baseTau: 0.5, finalTau: 0.5, targetScaleMin: 0.1, targetScaleMax: 0.4 });
    const rng = new Rng(9);
    const B = 4;
    const x = tf.tensor4d(rng.normalArray(B * SIZE * SIZE), [B, SIZE, SIZE, 1]);
    const labels = tf.tensor1d([0, 1, 2, 0], 'int32');
    const samples = { seed: 3, epoch: 1, indices: Int32Array.of(5, 6, 7, 8) }; // target blocks of 1, 4, 4 and 6 patches
    const masks = multiBlockMasks(samples, m.masking);
    assert.ok(new Set(masks.targetSize).size > 1, 'the batch mixes block sizes');
    const expected = tf.tidy(() => {
      const k = m.args.contextPatches;
      const context = m.encoder.encodeKept(x, masks.context, k); // [B, 1 + K, F], the batch's context encoder pass
      const full = m.targetEncoder.encodeKept(
        x,
        Int32Array.from({ length: B * 16 }, (_, i) => i % 16),
        16,
      );
      const preds: Tensor[] = [];
      const targets: Tensor[] = [];
      for (let s = 0; s < B; s++) {
        const n = masks.targetSize[s]!;
        const contextIndices = masks.context.slice(s * k, (s + 1) * k);
        for (let t = 0; t < 4; t++) {
          const block = masks.targets[s]!.slice(t * n, (t + 1) * n);
          preds.push(tf.reshape(m.predictor.predict(tf.slice(context, [s, 1, 0], [1, k, 192]), contextIndices, block), [n, 192]));
          targets.push(
            tf.gather(
              tf.reshape(full, [B * 17, 192]),
              tf.tensor1d(
                Array.from(block, (q) => s * 17 + q + 1),
                'int32',
              ),
            ),
          );
        }
      }
      return ijepaLoss(tf.concat(preds, 0) as tf.Tensor2D, tf.concat(targets, 0) as tf.Tensor2D).dataSync()[0]!;
    });
    const out = m.trainingStep([x], labels, samples);
    const loss = out.metrics.loss!.dataSync()[0]!;
    assert.ok(close(loss, expected, 1e-4), `step ${loss} vs per-block ${expected}`);
    const before = m.targetEncoder.parameters()[3]!.dataSync().slice();
    const online = m.encoder.parameters()[3]!.dataSync();
    m.onTrainBatchEnd({ step: 1, totalSteps: 4, epoch: 0 });
    m.targetEncoder
      .parameters()[3]!
      .dataSync()
      .forEach((v, i) => assert.ok(Math.abs(v - (0.5 * before[i]! + 0.5 * online[i]!)) < 1e-6));
    tf.dispose([out.loss, ...Object.values(out.metrics), x, labels]);
    m.dispose();
  });

  it('ijepaLoss: MSE on LayerNorm-ed targets; smooth-L1 quadratic below beta, linear above', () => {
    const targets = tf.tensor2d([1, 3, 2, 10, 0, -10], [2, 3]);
    const normalised = tf.tidy(() => {
      const { mean, variance } = tf.moments(targets, 1, true);
      return tf.div(tf.sub(targets, mean), tf.sqrt(tf.add(variance, 1e-5))) as tf.Tensor2D;
    });
    const offsets = tf.tensor2d([0.5, -0.5, 0.5, 2, -2, 2], [2, 3]);
    const predictions = tf.add(normalised, offsets) as tf.Tensor2D;
    assert.ok(close(ijepaLoss(predictions, targets, { distance: 'mse' }).dataSync()[0]!, (3 * 0.25 + 3 * 4) / 6));
    assert.ok(close(ijepaLoss(predictions, targets).dataSync()[0]!, (3 * 0.125 + 3 * 1.5) / 6));
    tf.dispose([targets, normalised, offsets, predictions]);
  });

  it('is for ViTs only, and a context larger than the smallest context block is a one-line user error', () => {
    assert.throws(
      () => build({}, 'mlp'),
      (e: unknown) => e instanceof UserError && /Vision Transformer/.test(e.message),
    );
    assert.throws(
      () => build({ contextPatches: 10 }),
      (e: unknown) => e instanceof UserError && /context_patches.*1\.\.9/.test(e.message) && !e.message.includes('\n'),
    );
  });
});
