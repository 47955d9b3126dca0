/**
 * MSN on one process: its defaults (the reference implementation's loss and head, lightly's
 * CIFAR-10 optimisation), the head, the prototypes and the state (student, EMA target), a
 * step's loss as `msnLoss` of the masked anchors and the whole target, the keyed masks, and
 * ME-MAX and the sharpening against their closed forms. (Against PyTorch:
 * tests/losses/cases.test.ts; W ranks: tests/distributed/zoo-exactness.full.test.ts.)
 */
import { strict as assert } from 'node:assert';
import { createBackbone } from '../../src/backbones/index.js';
import { initEngine } from '../../src/core/engine.js';
import { BatchNorm, GELU, Linear } from '../../src/core/layers.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor, type Tensor2D } from '../../src/core/tf.js';
import { msnLoss } from '../../src/losses/index.js';
import type { MethodArgs, SampleKeys } from '../../src/methods/base.js';
import { randomMasks } from '../../src/methods/mae-masking.js';
import { MSN } from '../../src/methods/msn.js';
import { getMethodClass, resolveMethodArgs } from '../../src/methods/registry.js';
import { SingleDeviceStrategy } from '../../src/trainer/strategy.js';
import { EMA_BASE_TAU, emaUnderAccumulation, methodContext, tinyVit } from './accumulation.js';

/** A ViT of one block, 16 wide, on 8 x 8 grayscale images in 4 px patches (4 patches, 3 kept at mask ratio 0.25). */

/** The small head and masks of these tests: 8-4, 5 prototypes, 1 of 4 patches masked. */
const SMALL = { projHiddenDim: 8, projOutputDim: 4, numPrototypes: 5, maskRatio: 0.25 };

/** MSN on {@link tinyVit}. */
function build(args: MethodArgs = {}, seed = 3): MSN {
  const m = new (getMethodClass('msn'))({
    createBackbone: tinyVit,
    numClasses: 3,
    rng: new Rng(seed),
    args: resolveMethodArgs('msn', { ...SMALL, ...args }),
  }) as MSN;
  m.setup({ group: new SingleDeviceStrategy().group });
  return m;
}

/** The target and one anchor (8 x 8) and two focal anchors (4 x 4) of 6 samples. */
function views(seed: number): Tensor[] {
  const rng = new Rng(seed);
  return [8, 8, 4, 4].map((s) => tf.tensor4d(rng.normalArray(6 * s * s), [6, s, s, 1]));
}

const samples = (indices: number[]): SampleKeys => ({ seed: 7, epoch: 0, indices: Int32Array.from(indices) });
const close = (a: number, b: number, rel = 1e-5) => Math.abs(a - b) <= rel * Math.max(Math.abs(a), Math.abs(b), 1e-6);

describe('MSN', () => {
  before(async () => {
    await initEngine('cpu-js');
  });

  it("defaults: the reference's loss (tau 0.1, T 0.25, Sinkhorn 3, ME-MAX 1), head 2048-2048-256 with BN, 1024 prototypes, patch drop 0.15, lightly's CIFAR-10 AdamW", () => {
    const d = resolveMethodArgs('msn', {});
    assert.deepEqual(
      [
        d.temperature,
        d.sharpenTemperature,
        d.sinkhornIterations,
        d.meMaxWeight,
        d.projHiddenDim,
        d.projOutputDim,
        d.numPrototypes,
        d.maskRatio,
        d.useBnInHead,
        d.baseTau,
        d.finalTau,
      ],
      [0.1, 0.25, 3, 1, 2048, 256, 1024, 0.15, true, 0.996, 1],
    );
    assert.deepEqual(MSN.optimDefaults, { optimizer: 'adamw', lr: 1.5e-4, classifierLr: 1.5e-4, weightDecay: 0.05 });
    assert.deepEqual([MSN.crops.globalCrops, MSN.crops.multiCrop, MSN.crops.localScale, MSN.defaultBackbone], [2, true, [0.05, 0.3], 'vit_tiny']);
  });

  it('head Linear-BN-GELU-Linear-BN-GELU-Linear, prototypes [K, D] in U(±1/√D); state: student, EMA target, prototypes; a ResNet is refused', () => {
    const m = build();
    assert.deepEqual(
      m.head.namedChildren().map(([, l]) => (l instanceof Linear ? 'Linear' : l instanceof GELU ? 'GELU' : l instanceof BatchNorm ? 'BN' : '?')),
      ['Linear', 'BN', 'GELU', 'Linear', 'BN', 'GELU', 'Linear'],
    );
    assert.deepEqual(m.prototypes.shape, [5, 4]);
    assert.ok(Array.from(m.prototypes.dataSync()).every((v) => Math.abs(v) <= 0.5));
    assert.ok(m.prototypes.trainable);
    const modules = new Set(Object.keys(m.stateDict()).map((k) => k.split('.')[0]));
    assert.deepEqual([...modules].sort(), ['backbone', 'classifier', 'head', 'momentumBackbone', 'momentumProjector', 'prototypes']);
    m.dispose();
    const resnet = () =>
      new (getMethodClass('msn'))({
        createBackbone: (rng) => createBackbone('tiny_resnet', { inChannels: 1, imageSize: 8, rng }),
        numClasses: 3,
        rng: new Rng(1),
        args: resolveMethodArgs('msn', {}),
      });
    assert.throws(resnet, /a Vision Transformer .* for method msn/);
  });

  it("a step's loss is msnLoss of the masked anchors (keyed masks, one per view) against the whole target; the target moves after the step", () => {
    const m = build({ baseTau: 0.5, finalTau: 0.5 });
    const v = views(1);
    const keys = samples([4, 9, 2, 7, 0, 5]);
    const labels = tf.tensor1d([0, 1, 2, 0, 1, 2], 'int32');
    const expected = tf.tidy(() => {
      const target = m.momentumHead.forward(m.momentumBackbone.forward(v[0]!)) as Tensor2D;
      const cls = v.slice(1).map((x, i) => {
        const masks = randomMasks(keys, x.shape[1] === 8 ? 4 : 1, 0.25, i + 1);
        return tf.reshape(tf.slice(m.encoder.encodeKept(x, masks.keep, masks.keptPerSample), [0, 0, 0], [6, 1, 16]), [6, 16]);
      });
      const anchors = tf.split(m.head.forward(tf.concat(cls, 0)), 3, 0) as Tensor2D[];
      const out = msnLoss(anchors, target, m.prototypes as Tensor2D);
      return [out.loss, out.crossEntropy, out.meMax].map((t) => t.dataSync()[0]!);
    });
    const out = m.trainingStep(v, labels, keys);
    const got = ['loss', 'cross_entropy', 'me_max'].map((k) => out.metrics[k]!.dataSync()[0]!);
    got.forEach((x, i) => assert.ok(close(x, expected[i]!), `${['loss', 'cross_entropy', 'me_max'][i]}: ${x} vs ${expected[i]}`));
    // Other sample keys draw other masks, so another loss from the same images.
    const other = m.trainingStep(v, labels, samples([1, 3, 6, 8, 10, 11]));
    assert.notEqual(other.metrics.cross_entropy!.dataSync()[0], got[1]);
    const targetBefore = m.momentumHead.parameters()[0]!.dataSync().slice();
    m.onTrainBatchEnd({ step: 1, totalSteps: 4, epoch: 0 });
    const student = m.head.parameters()[0]!.dataSync();
    m.momentumHead
      .parameters()[0]!
      .dataSync()
      .forEach((x, i) => assert.ok(Math.abs(x - (0.5 * targetBefore[i]! + 0.5 * student[i]!)) < 1e-7));
    tf.dispose([out.loss, ...Object.values(out.metrics), other.loss, ...Object.values(other.metrics), ...v, labels]);
    m.dispose();
  });

  it('ME-MAX is log K - H(mean anchor probability); the targets are softmax(t P^T / tau) sharpened by power 1/T', () => {
    // Prototypes ±e1, ±e2 (K = 4); anchors e1, -e1, e2, -e2: the mean probability is uniform, ME-MAX 0.
    const protos = tf.tensor2d([1, 0, -1, 0, 0, 1, 0, -1], [4, 2]);
    const spread = tf.tensor2d([1, 0, -1, 0, 0, 1, 0, -1], [4, 2]);
    const uniform = msnLoss([spread], spread, protos, { sinkhornIterations: 0 });
    assert.ok(Math.abs(uniform.meMax.dataSync()[0]!) < 1e-6, `uniform me-max ${uniform.meMax.dataSync()[0]}`);
    // All anchors e1, tau 1: p = softmax([1, -1, 0, 0]) each; the target e1 sharpened: q = p^4 / Σ p^4.
    const e1 = tf.tensor2d([1, 0, 1, 0, 1, 0, 1, 0], [4, 2]);
    const collapsed = msnLoss([e1], e1, protos, { sinkhornIterations: 0, temperature: 1, sharpenTemperature: 0.25 });
    const logits = [1, -1, 0, 0];
    const z = logits.reduce((s, l) => s + Math.exp(l), 0);
    const p = logits.map((l) => Math.exp(l) / z);
    const memax = Math.log(4) + p.reduce((s, x) => s + x * Math.log(x), 0);
    const z4 = p.reduce((s, x) => s + x ** 4, 0);
    const ce = -p.reduce((s, x) => s + (x ** 4 / z4) * Math.log(x), 0);
    assert.ok(close(collapsed.meMax.dataSync()[0]!, memax, 1e-5), `collapsed me-max ${collapsed.meMax.dataSync()[0]} vs ${memax}`);
    assert.ok(close(collapsed.crossEntropy.dataSync()[0]!, ce, 1e-4), `cross-entropy ${collapsed.crossEntropy.dataSync()[0]} vs ${ce}`);
    tf.dispose([protos, spread, e1, ...Object.values(uniform), ...Object.values(collapsed)]);
  });

  it("accumulation: k = 2 micro-batches of N move the target once (tau · target + (1 − tau) · the stepped student) and each micro-batch's loss is its own from the step's start (ME-MAX and Sinkhorn-Knopp per micro-batch); a target moved per micro-batch fails both", async () => {
    const got = await emaUnderAccumulation(() => new MSN({ ...methodContext('msn', { ...SMALL, baseTau: EMA_BASE_TAU }), createBackbone: tinyVit }), 4);
    assert.ok(got.accumulatedError < 1e-5, `accumulated: the target is off the one EMA update by ${got.accumulatedError}`);
    assert.ok(got.perMicroBatchError > 1e-2, `negative control: the per-micro-batch target is off by only ${got.perMicroBatchError}`);
    assert.ok(close(got.accumulatedLoss, got.ownLoss, 1e-4), `loss ${got.accumulatedLoss} vs the micro-batches' own ${got.ownLoss}`);
    assert.ok(!close(got.perMicroBatchLoss, got.ownLoss, 1e-3), 'negative control: the second micro-batch saw a moved target');
  });
});
