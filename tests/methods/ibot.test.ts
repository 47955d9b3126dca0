/**
 * iBOT on one process, on a tiny ViT (D 16, 1 block, 4 px patches of 8 px images): its
 * defaults (bytedance/ibot's ViT-S/16 command and main_ibot.py), the ViT's all-token pass with a
 * mask token, the block masks keyed per sample, a step's loss and both centres as `ibotLoss`
 * gives them, and both centres under gradient accumulation (k = 2 micro-batches of N equal one
 * batch of 2N; a patch centre moved per micro-batch fails it). (Against PyTorch:
 * tests/losses/cases.test.ts; W ranks: tests/distributed/zoo-table.ts.)
 */
import { strict as assert } from 'node:assert';
import { VisionTransformer } from '../../src/backbones/vit.js';
import { initEngine } from '../../src/core/engine.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor, type Tensor1D, type Tensor2D } from '../../src/core/tf.js';
import { ibotLoss, maskedRows } from '../../src/losses/ibot.js';
import type { MethodArgs, MethodContext, SampleKeys } from '../../src/methods/base.js';
import { blockMasks } from '../../src/methods/block-masking.js';
import { IBOT } from '../../src/methods/ibot.js';
import { resolveMethodArgs } from '../../src/methods/registry.js';
import { SingleDeviceStrategy } from '../../src/trainer/strategy.js';
import { batchOf, methodContext, N, runStep, worstDifference, tinyVit } from './accumulation.js';

const SMALL = { projHiddenDim: 8, projOutputDim: 4, numPrototypes: 6, freezeLastLayerEpochs: 0, maskProbability: 1, maskRatio: 0.5, maskRatioVariation: 0 };

function context(args: MethodArgs = {}): MethodContext {
  return { ...methodContext('ibot', { ...SMALL, ...args }), createBackbone: tinyVit };
}

function build(args: MethodArgs = {}): IBOT {
  const m = new IBOT(context(args));
  m.setup({ group: new SingleDeviceStrategy().group });
  return m;
}

/** iBOT whose patch centre moves after every micro-batch's loss (the bug class of lightly #2062): the negative control. */
class IbotPatchCentrePerMicroBatch extends IBOT {
  override trainingStep(...args: Parameters<IBOT['trainingStep']>): ReturnType<IBOT['trainingStep']> {
    const out = super.trainingStep(...args);
    this.applyPendingPatchCentre();
    return out;
  }
}

const close = (a: number, b: number, rel = 1e-5) => Math.abs(a - b) <= rel * Math.max(Math.abs(a), Math.abs(b), 1e-6);
const keys = (indices: number[]): SampleKeys => ({ seed: 7, epoch: 0, indices: Int32Array.from(indices) });

describe('iBOT', () => {
  before(async () => {
    await initEngine('cpu-js');
  });

  it("defaults: bytedance/ibot's ViT-S/16 command and main_ibot.py (K 8192, temperatures 0.04 -> 0.07 over 30 epochs, masks 0 or 0.3 +- 0.2, AdamW 5e-4)", () => {
    const d = resolveMethodArgs('ibot', {});
    assert.deepEqual(
      [d.numPrototypes, d.studentTemperature, d.teacherTemperature, d.warmupTeacherTemperature, d.teacherPatchTemperature, d.warmupTeacherPatchTemperature],
      [8192, 0.1, 0.07, 0.04, 0.07, 0.04],
    );
    assert.deepEqual(
      [d.warmupTeacherTemperatureEpochs, d.centreMomentum, d.patchCentreMomentum, d.patchLossWeight, d.baseTau, d.clipGrad],
      [30, 0.9, 0.9, 1, 0.996, 3],
    );
    assert.deepEqual([d.maskRatio, d.maskRatioVariation, d.maskProbability, d.freezeLastLayerEpochs], [0.3, 0.2, 0.5, 1]);
    assert.deepEqual(IBOT.optimDefaults, { optimizer: 'adamw', lr: 5e-4, classifierLr: 0.1, weightDecay: 0.04 });
    assert.equal(IBOT.defaultBackbone, 'vit_tiny');
    const m = build();
    assert.deepEqual([m.teacherPatchTemperature(0), m.teacherPatchTemperature(29)], [0.04, 0.07]);
    assert.deepEqual(m.maskToken.shape, [16]);
    assert.deepEqual(
      ['centre', 'patchCentre', 'maskToken'].map((k) => m.stateDict()[k]?.shape),
      [[6], [6], [16]],
    );
    m.dispose();
  });

  it('encodeTokens: token 0 is forward; a masked patch is the mask token whatever its pixels, and the token gets the gradient', () => {
    const vit = tinyVit(new Rng(1));
    const x = tf.tensor4d(new Rng(2).normalArray(2 * 64), [2, 8, 8, 1]);
    const tokens = vit.encodeTokens(x);
    assert.deepEqual(tokens.shape, [2, 5, 16]);
    const cls = tf.reshape(tf.slice(tokens, [0, 0, 0], [2, 1, 16]), [2, 16]);
    assert.ok(tf.max(tf.abs(tf.sub(cls, vit.forward(x)))).dataSync()[0]! < 1e-6);
    const mask = tf.tensor2d([1, 0, 0, 0, 0, 0, 0, 0], [2, 4]); // sample 0's top-left patch
    const token = tf.variable(tf.randomNormal([16]));
    const masked = vit.encodeTokens(x, mask, token);
    const moved = tf.tidy(() =>
      tf.add(
        x,
        tf.mul(
          tf.pad(tf.ones([1, 4, 4, 1]), [
            [0, 1],
            [0, 4],
            [0, 4],
            [0, 0],
          ]),
          5,
        ),
      ),
    );
    assert.ok(tf.max(tf.abs(tf.sub(vit.encodeTokens(moved, mask, token), masked))).dataSync()[0]! < 1e-6, "the masked patch's pixels do not matter");
    assert.ok(tf.max(tf.abs(tf.sub(masked, tokens))).dataSync()[0]! > 1e-3, 'the mask changes the tokens');
    const weights = tf.randomNormal([2, 5, 16]); // (a plain sum of LayerNorm outputs has no gradient)
    const grad = tf.grad((t: Tensor) => tf.sum(tf.mul(vit.encodeTokens(x, mask, t), weights)))(token);
    assert.ok(tf.max(tf.abs(grad)).dataSync()[0]! > 0);
    assert.throws(() => vit.encodeTokens(x, mask), /mask token/);
    tf.dispose([x, tokens, cls, mask, token, masked, moved, weights, grad]);
    vit.dispose();
  });

  it('block masks: keyed per sample (not by the batch or the position in it), 0.3 +- 0.2 of an 8 x 8 grid in blocks (up to a block short), or none', () => {
    const options = { ratio: 0.3, ratioVariation: 0.2, maskProbability: 0.5 };
    const a = blockMasks(keys([5, 9, 11, 40]), 8, 8, options, 0);
    const b = blockMasks(keys([11, 77, 5]), 8, 8, options, 0);
    assert.deepEqual(a.slice(0, 64), b.slice(128, 192));
    assert.deepEqual(a.slice(128, 192), b.slice(0, 64));
    assert.notDeepEqual(blockMasks(keys([5]), 8, 8, options, 1), a.slice(0, 64), 'another crop, another mask');
    const many = blockMasks(keys(Array.from({ length: 200 }, (_, i) => i)), 8, 8, options, 0);
    const counts = Array.from({ length: 200 }, (_, s) => many.slice(s * 64, (s + 1) * 64).reduce((t, v) => t + v, 0));
    const masked = counts.filter((c) => c > 0);
    assert.ok(masked.length > 70 && masked.length < 130, `${masked.length} of 200 masked`);
    // BEiT's generator stops short of the target when what is left is below its smallest block ((8 // 3)² = 4 patches).
    assert.ok(
      masked.every((c) => c > 0.1 * 64 - 4 && c <= 0.5 * 64),
      `counts ${Math.min(...masked)}..${Math.max(...masked)}`,
    );
    const full = blockMasks(keys([3]), 8, 8, { ratio: 0.5, ratioVariation: 0, maskProbability: 1 }, 0);
    assert.equal(
      full.reduce((t, v) => t + v, 0),
      32,
    );
  });

  it("a step's loss and terms are ibotLoss of the masked student's and the teacher's tokens; both centres move after the step, to the loss's", () => {
    const m = build({ centreMomentum: 0.5, patchCentreMomentum: 0.5 });
    const views = [0, 1].map((v) => tf.tensor4d(new Rng(10 + v).normalArray(6 * 64), [6, 8, 8, 1]));
    const labels = tf.tensor1d([0, 1, 2, 0, 1, 2], 'int32');
    const samples = keys([0, 1, 2, 3, 4, 5]);
    const expected = tf.tidy(() => {
      const masks = views.map((_, g) => blockMasks(samples, 2, 2, { ratio: 0.5, ratioVariation: 0, maskProbability: 1 }, g));
      // The heads on every token (the method applies the student's to the [CLS] and masked patch rows only: the same rows).
      const heads = (head: IBOT['head'], tokens: Tensor) => tf.reshape(head.forward(tf.reshape(tokens, [24 + 6, 16])), [6, 5, 6]);
      const s = views.map((v, g) => heads(m.head, m.vit.encodeTokens(v, tf.tensor2d(masks[g]!, [6, 4]), m.maskToken)));
      const t = views.map((v) => heads(m.momentumHead, (m.momentumBackbone as VisionTransformer).encodeTokens(v)));
      const cls = (x: Tensor) => tf.reshape(tf.slice(x, [0, 0, 0], [6, 1, 6]), [6, 6]) as Tensor2D;
      const patches = (x: Tensor) => tf.slice(x, [0, 1, 0], [6, 4, 6]) as tf.Tensor3D;
      const masked = s.map((x, g) => tf.gather(tf.reshape(patches(x), [24, 6]), tf.tensor1d(maskedRows(masks[g]!, 4).rows, 'int32')) as Tensor2D);
      const options = { studentTemperature: 0.1, teacherTemperature: 0.04, teacherPatchTemperature: 0.04, centreMomentum: 0.5, patchCentreMomentum: 0.5 };
      const out = ibotLoss(s.map(cls), t.map(cls), masked, t.map(patches), masks, m.centre as Tensor1D, m.patchCentre as Tensor1D, options);
      return [out.loss, out.cls, out.patch, out.centre, out.patchCentre].map((x) => x.dataSync().slice());
    });
    const out = m.trainingStep(views, labels, samples);
    ['loss', 'cls', 'patch'].forEach((k, i) =>
      assert.ok(close(out.metrics[k]!.dataSync()[0]!, expected[i]![0]!), `${k}: ${out.metrics[k]!.dataSync()[0]} vs ${expected[i]![0]}`),
    );
    assert.ok(expected[2]![0]! > 0, 'the patch loss is not 0');
    assert.deepEqual(Array.from(m.patchCentre.dataSync()), [0, 0, 0, 0, 0, 0], 'the centres wait for the optimizer step');
    m.onTrainBatchEnd({ step: 1, totalSteps: 4, epoch: 0 });
    m.centre.dataSync().forEach((v, k) => assert.ok(close(v, expected[3]![k]!)));
    m.patchCentre.dataSync().forEach((v, k) => assert.ok(close(v, expected[4]![k]!)));
    assert.ok(Math.max(...Array.from(m.patchCentre.dataSync(), Math.abs)) > 1e-3, 'the patch centre moved');
    tf.dispose([out.loss, ...Object.values(out.metrics), ...views, labels]);
    m.dispose();
  });

  it('accumulation: k = 2 micro-batches of N equal one batch of 2N (both centres, the teacher, every parameter, the loss); a patch centre moved per micro-batch fails it', async () => {
    const args = { centreMomentum: 1 }; // the [CLS] centre stays: only the patch centre can tell the per-micro-batch control
    const whole = await runStep(new IBOT(context(args)), [batchOf(2, 0, 2 * N)]);
    const halves = [batchOf(2, 0, N), batchOf(2, N, N)];
    const accumulated = await runStep(new IBOT(context(args)), halves);
    const perMicroBatch = await runStep(new IbotPatchCentrePerMicroBatch(context(args)), halves);
    assert.ok(Math.max(...Array.from(whole.state.patchCentre!, Math.abs)) > 1e-3, 'the patch centre moved');
    const names = Object.keys(whole.state);
    assert.ok(names.includes('maskToken') && names.some((n) => n.startsWith('momentumBackbone.')));
    const got = worstDifference(accumulated.state, whole.state, names);
    assert.ok(got.difference < 1e-4, `accumulated vs one batch: ${got.name} differs by ${got.difference}`);
    assert.ok(Math.abs(accumulated.loss - whole.loss) < 1e-4 * Math.abs(whole.loss), `loss ${accumulated.loss} vs ${whole.loss}`);
    const wrong = worstDifference(perMicroBatch.state, whole.state, ['patchCentre']);
    assert.ok(wrong.difference > 0.05, `negative control: the per-micro-batch patch centre differs by only ${wrong.difference}`);
    assert.ok(Math.abs(perMicroBatch.loss - whole.loss) > 1e-4 * Math.abs(whole.loss), 'negative control: the second micro-batch saw a moved patch centre');
  });
});
