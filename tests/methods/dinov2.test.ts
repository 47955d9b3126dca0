/**
 * DINOv2 on one process, on a tiny ViT (D 16, 1 block, 4 px patches of 8 px images): its
 * defaults (DINOv2's loss and teacher, iBOT's small-data optimisation), its state (no centre:
 * the EMA teacher and the mask token), a step's loss and terms as `dinov2Loss` gives them from
 * the masked student's and the teacher's tokens, and gradient accumulation (k = 2 micro-batches
 * of N): the teacher moves once, after the optimizer step, and each micro-batch's loss (its
 * Sinkhorn-Knopp balancing and KoLeo neighbours are its own) is the one it gives alone from the
 * step's start; a teacher moved after every micro-batch fails both. (Against PyTorch:
 * tests/losses/cases.test.ts; W ranks, Sinkhorn-Knopp and KoLeo per rank failing:
 * tests/distributed/zoo-table.ts.)
 */
import { strict as assert } from 'node:assert';
import { VisionTransformer } from '../../src/backbones/vit.js';
import { initEngine } from '../../src/core/engine.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor2D } from '../../src/core/tf.js';
import { dinov2Loss } from '../../src/losses/dinov2.js';
import type { MethodArgs, MethodContext, SampleKeys } from '../../src/methods/base.js';
import { blockMasks } from '../../src/methods/block-masking.js';
import { DINOv2 } from '../../src/methods/dinov2.js';
import { clsToken, headOfMaskedPatches } from '../../src/methods/masked-tokens.js';
import { resolveMethodArgs } from '../../src/methods/registry.js';
import { SingleDeviceStrategy } from '../../src/trainer/strategy.js';
import { EMA_BASE_TAU, emaUnderAccumulation, methodContext, tinyVit } from './accumulation.js';

const SMALL = { projHiddenDim: 8, projOutputDim: 4, numPrototypes: 6, freezeLastLayerEpochs: 0, maskProbability: 1, maskRatio: 0.5, maskRatioVariation: 0 };

function context(args: MethodArgs = {}): MethodContext {
  return { ...methodContext('dinov2', { ...SMALL, ...args }), createBackbone: tinyVit };
}

function build(args: MethodArgs = {}): DINOv2 {
  const m = new DINOv2(context(args));
  m.setup({ group: new SingleDeviceStrategy().group });
  return m;
}

const close = (a: number, b: number, rel = 1e-5) => Math.abs(a - b) <= rel * Math.max(Math.abs(a), Math.abs(b), 1e-6);
const keys = (indices: number[]): SampleKeys => ({ seed: 7, epoch: 0, indices: Int32Array.from(indices) });

describe('DINOv2', () => {
  before(async () => {
    await initEngine('cpu-js');
  });

  it("defaults: DINOv2's loss and teacher (Sinkhorn-Knopp 3 iterations, KoLeo 0.1, masks 0 or 0.1-0.5, tau 0.992, temperatures 0.04 -> 0.07 over 30 epochs), iBOT's small-data optimisation (K 8192, AdamW 5e-4)", () => {
    const d = resolveMethodArgs('dinov2', {});
    assert.deepEqual(
      [
        d.numPrototypes,
        d.projHiddenDim,
        d.projOutputDim,
        d.studentTemperature,
        d.teacherTemperature,
        d.warmupTeacherTemperature,
        d.warmupTeacherTemperatureEpochs,
      ],
      [8192, 2048, 256, 0.1, 0.07, 0.04, 30],
    );
    assert.deepEqual(
      [d.sinkhornIterations, d.patchLossWeight, d.koleoWeight, d.baseTau, d.finalTau, d.clipGrad, d.freezeLastLayerEpochs],
      [3, 1, 0.1, 0.992, 1, 3, 1],
    );
    assert.deepEqual([d.maskRatio, d.maskRatioVariation, d.maskProbability], [0.3, 0.2, 0.5]);
    assert.deepEqual(DINOv2.optimDefaults, { optimizer: 'adamw', lr: 5e-4, classifierLr: 0.1, weightDecay: 0.04 });
    assert.deepEqual([DINOv2.defaultBackbone, DINOv2.viewRecipe, DINOv2.crops.localScale], ['vit_tiny', 'byol', [0.05, 0.32]]);
    const m = build();
    const state = Object.keys(m.stateDict());
    assert.ok(!state.some((n) => /centre/i.test(n)), `no centre: ${state.filter((n) => /centre/i.test(n))}`);
    assert.deepEqual(m.stateDict().maskToken?.shape, [16]);
    assert.throws(() => build({ maskRatio: 0.1, maskRatioVariation: 0.2 }), /mask_ratio_variation/);
    m.dispose();
  });

  it("a step's loss and terms are dinov2Loss of the masked student's and the teacher's tokens (KoLeo of the student's [CLS] features); no state moves before the optimizer step", () => {
    const m = build();
    const views = [0, 1].map((v) => tf.tensor4d(new Rng(10 + v).normalArray(6 * 64), [6, 8, 8, 1]));
    const labels = tf.tensor1d([0, 1, 2, 0, 1, 2], 'int32');
    const samples = keys([0, 1, 2, 3, 4, 5]);
    const teacherBefore = m.momentumHead.parameters()[0]!.dataSync().slice();
    const expected = tf.tidy(() => {
      const masks = views.map((_, g) => blockMasks(samples, 2, 2, { ratio: 0.5, ratioVariation: 0, maskProbability: 1 }, g));
      const student = views.map((v, g) => m.vit.encodeTokens(v, tf.tensor2d(masks[g]!, [6, 4]), m.maskToken));
      const teacher = views.map((v) => (m.momentumBackbone as VisionTransformer).encodeTokens(v));
      const options = { studentTemperature: 0.1, teacherTemperature: 0.04, sinkhornIterations: 3, patchLossWeight: 1, koleoWeight: 0.1 };
      const out = dinov2Loss(
        student.map((t) => m.head.forward(clsToken(t)) as Tensor2D),
        teacher.map((t) => m.momentumHead.forward(clsToken(t)) as Tensor2D),
        student.map((t, g) => headOfMaskedPatches(m.head, t, masks[g]!, 6)),
        teacher.map((t, g) => headOfMaskedPatches(m.momentumHead, t, masks[g]!, 6)),
        masks,
        student.map(clsToken),
        options,
      );
      return [out.loss, out.cls, out.patch, out.koleo].map((x) => x.dataSync()[0]!);
    });
    const out = m.trainingStep(views, labels, samples);
    ['loss', 'cls', 'patch', 'koleo'].forEach((k, i) =>
      assert.ok(close(out.metrics[k]!.dataSync()[0]!, expected[i]!), `${k}: ${out.metrics[k]!.dataSync()[0]} vs ${expected[i]}`),
    );
    assert.ok(expected[2]! > 0 && Math.abs(expected[3]!) > 0, 'the patch loss and KoLeo are not 0');
    assert.deepEqual(m.momentumHead.parameters()[0]!.dataSync(), teacherBefore, 'the teacher waits for the optimizer step');
    tf.dispose([out.loss, ...Object.values(out.metrics), ...views, labels]);
    m.dispose();
  });

  it("accumulation: k = 2 micro-batches of N move the teacher once (tau · teacher + (1 − tau) · the stepped student) and each micro-batch's loss is its own from the step's start; a teacher moved per micro-batch fails both", async () => {
    const got = await emaUnderAccumulation(() => new DINOv2(context({ baseTau: EMA_BASE_TAU })), 2);
    assert.ok(got.accumulatedError < 1e-5, `accumulated: the teacher is off the one EMA update by ${got.accumulatedError}`);
    assert.ok(got.perMicroBatchError > 1e-2, `negative control: the per-micro-batch teacher is off by only ${got.perMicroBatchError}`);
    assert.ok(close(got.accumulatedLoss, got.ownLoss, 1e-4), `loss ${got.accumulatedLoss} vs the micro-batches' own ${got.ownLoss}`);
    assert.ok(!close(got.perMicroBatchLoss, got.ownLoss, 1e-3), 'negative control: the second micro-batch saw a moved teacher');
  });
});
