/**
 * VICRegL on one process: its defaults (the reference implementation's loss, its ResNet-50
 * optimisation), the ResNets' feature maps (their average is `forward`), the heads, a step's
 * loss as `vicreglLoss` of the pooled and the per-location embeddings, and the loss's parts
 * against closed forms: with α 1 it is VICReg with half the covariance weight (the reference's
 * mean over views), and a map matched against a permutation of itself has no local invariance
 * term. (Against PyTorch: tests/losses/cases.test.ts; W ranks: tests/distributed/zoo-exactness.full.test.ts.)
 */
import { strict as assert } from 'node:assert';
import { createBackbone, hasFeatureMaps } from '../../src/backbones/index.js';
import { initEngine } from '../../src/core/engine.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor, type Tensor2D } from '../../src/core/tf.js';
import { vicreglLoss, vicregLossWithTerms } from '../../src/losses/index.js';
import type { MethodArgs } from '../../src/methods/base.js';
import { getMethodClass, resolveMethodArgs } from '../../src/methods/registry.js';
import { mapLocations, VICRegL } from '../../src/methods/vicregl.js';
import { SingleDeviceStrategy } from '../../src/trainer/strategy.js';

function build(args: MethodArgs = {}, backbone = 'tiny_resnet'): VICRegL {
  const m = new (getMethodClass('vicregl'))({
    createBackbone: (rng) => createBackbone(backbone, { inChannels: 1, imageSize: 8, rng, mlpHidden: [16] }),
    numClasses: 3,
    rng: new Rng(3),
    args: resolveMethodArgs('vicregl', { projHiddenDim: 16, projOutputDim: 8, mapsHiddenDim: 8, mapsOutputDim: 4, matchesThere: 3, matchesBack: 2, ...args }),
  }) as VICRegL;
  m.setup({ group: new SingleDeviceStrategy().group });
  return m;
}

/** The crop geometry of 6 samples' 3 views (top, left, height, width, flipped) in a 28 px source image. */
const CROPS = [0, 1, 2].map((v) =>
  Float32Array.from({ length: 6 * 5 }, (_, i) => (i % 5 === 4 ? (i + v) % 2 : i % 5 < 2 ? (i * 3 + v) % 9 : 10 + ((i * 7 + v * 5) % 18))),
);

const close = (a: number, b: number, rel = 1e-5) => Math.abs(a - b) <= rel * Math.max(Math.abs(a), Math.abs(b), 1e-6);
const value = (t: Tensor) => t.dataSync()[0]!;

describe('VICRegL', () => {
  before(async () => {
    await initEngine('cpu-js');
  });

  it("defaults: the reference's loss (alpha 0.75, 25 / 25 / 1, 20 and 4 matches, maps projector 512-512-512) and ResNet-50 recipe (LARS 0.3, 1e-6)", () => {
    const d = resolveMethodArgs('vicregl', {});
    assert.deepEqual(
      [
        d.alpha,
        d.simLossWeight,
        d.varLossWeight,
        d.covLossWeight,
        d.matchesThere,
        d.matchesBack,
        d.mapsHiddenDim,
        d.mapsOutputDim,
        d.projHiddenDim,
        d.projOutputDim,
      ],
      [0.75, 25, 25, 1, 20, 4, 512, 512, 2048, 2048],
    );
    assert.deepEqual(VICRegL.optimDefaults, { optimizer: 'lars', lr: 0.3, classifierLr: 0.1, weightDecay: 1e-6 });
    // Both matchings, a flipped grid mirrored, the feature matching keeping 20 and 4 (not the reference's every location: memory).
    assert.deepEqual([d.locationMatching, d.flipGrid, d.l2AllMatches], [true, true, false]);
    assert.deepEqual([VICRegL.crops.globalCrops, VICRegL.crops.multiCrop, VICRegL.viewRecipe], [2, true, 'vicreg']);
  });

  it("the ResNets' feature maps: tiny_resnet's 8x8 input gives a 2x2 map whose average is forward's features; the mlp has none and is refused", () => {
    const backbone = createBackbone('tiny_resnet', { inChannels: 1, imageSize: 8, rng: new Rng(1) });
    assert.ok(hasFeatureMaps(backbone));
    const x = tf.randomNormal([3, 8, 8, 1]);
    const map = backbone.featureMap(x);
    assert.deepEqual(map.shape, [3, 2, 2, 128]);
    const pooled = tf.mean(map, [1, 2]).dataSync();
    backbone
      .forward(x)
      .dataSync()
      .forEach((v, i) => assert.ok(Math.abs(v - pooled[i]!) < 1e-6));
    assert.ok(hasFeatureMaps(createBackbone('resnet18', { inChannels: 1, imageSize: 8, rng: new Rng(1), cifarStem: true })));
    assert.throws(() => build({}, 'mlp'), /a ResNet .* for method vicregl/);
    tf.dispose([x, map]);
  });

  it("a step's loss and logged parts are vicreglLoss of the pooled embeddings and the maps projector's per-location ones", () => {
    const m = build();
    const rng = new Rng(5);
    const views = [8, 8, 4].map((s) => tf.tensor4d(rng.normalArray(6 * s * s), [6, s, s, 1]));
    const labels = tf.tensor1d([0, 1, 2, 0, 1, 2], 'int32');
    const expected = tf.tidy(() => {
      const maps = [tf.concat(views.slice(0, 2), 0), views[2]!].map((x) => m.spatialBackbone.featureMap(x));
      const perView = [...tf.split(maps[0]!, 2, 0), maps[1]!];
      const emb = perView.map((p) => m.projector.forward(tf.mean(p, [1, 2])) as Tensor2D);
      const local = perView.map((p) => {
        const [b, h, w, f] = p.shape;
        return tf.reshape(m.mapsProjector.forward(tf.reshape(p, [b! * h! * w!, f!])), [b!, h! * w!, 4]) as tf.Tensor3D;
      });
      const locations = CROPS.map((c, v) => mapLocations(c, perView[v]!.shape[1]!, perView[v]!.shape[2]!, true));
      const out = vicreglLoss(emb, local, { numMatches: [3, 2], l2AllMatches: false, locations });
      return [out.loss, out.global, out.local].map(value);
    });
    const out = m.trainingStep(views, labels, { seed: 1, epoch: 0, indices: Int32Array.from([0, 1, 2, 3, 4, 5]), crops: CROPS });
    const got = ['loss', 'global_loss', 'local_loss'].map((k) => value(out.metrics[k]!));
    got.forEach((v, i) => assert.ok(close(v, expected[i]!), `${['loss', 'global_loss', 'local_loss'][i]}: ${v} vs ${expected[i]}`));
    assert.ok(close(got[0]!, 0.75 * got[1]! + 0.25 * got[2]!));
    tf.dispose([out.loss, ...Object.values(out.metrics), ...views, labels]);
    m.dispose();
  });

  it('alpha 1: VICReg with half the covariance weight; a map matched against its own locations permuted has no local invariance', () => {
    const rng = new Rng(9);
    const [z1, z2] = [0, 1].map(() => tf.tensor2d(rng.normalArray(10 * 6), [10, 6]));
    const map = tf.tensor3d(rng.normalArray(10 * 4 * 3), [10, 4, 3]);
    const permuted = tf.gather(map, [2, 0, 3, 1], 1) as tf.Tensor3D;
    const globalOnly = vicreglLoss([z1!, z2!], [map, permuted], { alpha: 1 });
    const vicreg = vicregLossWithTerms(z1!, z2!, { simWeight: 25, varWeight: 25, covWeight: 0.5 });
    assert.ok(close(value(globalOnly.loss), value(vicreg.loss)), `${value(globalOnly.loss)} vs ${value(vicreg.loss)}`);
    // Every location's nearest neighbour is itself: the local loss is its variance and covariance terms only.
    const noInvariance = vicreglLoss([z1!, z2!], [map, permuted], { alpha: 0, invWeight: 0 });
    const withInvariance = vicreglLoss([z1!, z2!], [map, permuted], { alpha: 0 });
    assert.ok(close(value(withInvariance.loss), value(noInvariance.loss), 1e-6));
    // Unmatched (another map): the invariance term is there.
    const other = tf.tensor3d(rng.normalArray(10 * 4 * 3), [10, 4, 3]);
    const apart = vicreglLoss([z1!, z2!], [map, other], { alpha: 0 });
    const apartNoInv = vicreglLoss([z1!, z2!], [map, other], { alpha: 0, invWeight: 0 });
    assert.ok(value(apart.loss) > value(apartNoInv.loss) + 1);
    tf.dispose([
      z1!,
      z2!,
      map,
      permuted,
      other,
      ...Object.values(globalOnly),
      ...Object.values(vicreg),
      ...Object.values(noInvariance),
      ...Object.values(withInvariance),
    ]);
    tf.dispose([...Object.values(apart), ...Object.values(apartNoInv)]);
  });

  it("mapLocations: the centres of the crop box's h x w cells in source pixels, row-major; a flipped view's columns mirrored (flipGrid), or not", () => {
    const crops = Float32Array.of(2, 4, 8, 12, 1); // top 2, left 4, 8 x 12, flipped
    const rows = [4, 8]; // 2 + (r + 0.5) * 8 / 2
    const columns = [6, 10, 14]; // 4 + (c + 0.5) * 12 / 3
    const grid = (cols: number[]) => rows.flatMap((r) => cols.flatMap((c) => [r, c]));
    assert.deepEqual(Array.from(mapLocations(crops, 2, 3, false)), grid(columns));
    assert.deepEqual(Array.from(mapLocations(crops, 2, 3, true)), grid([...columns].reverse()));
    assert.deepEqual(Array.from(mapLocations(Float32Array.of(2, 4, 8, 12, 0), 2, 3, true)), grid(columns));
  });

  it('location matching pairs the cells that show the same pixels: a view and its mirror image, matched by position, have no local invariance term only when flipped grids are mirrored', () => {
    const rng = new Rng(4);
    const [z1, z2] = [0, 1].map(() => tf.tensor2d(rng.normalArray(8 * 6), [8, 6]));
    // 8 samples, a 3x3 map of C = 3 per view; view 1 is view 0 flipped: its map's columns mirrored.
    const map = tf.tensor4d(rng.normalArray(8 * 3 * 3 * 3), [8, 3, 3, 3]);
    const mirrored = tf.reverse(map, 2);
    const [m0, m1] = [map, mirrored].map((t) => tf.reshape(t, [8, 9, 3]) as tf.Tensor3D);
    const box = (flipped: number) => Float32Array.from({ length: 8 * 5 }, (_, i) => [1, 2, 9, 9, flipped][i % 5]!);
    const crops = [box(0), box(1)];
    // Feature matching off in effect (invWeight 0 there is not separable), so compare the location half alone: with one
    // match kept by features and all by position, the invariance of the mirrored grid vanishes only with flipGrid.
    const local = (flip: boolean) =>
      tf.tidy(() => {
        const locations = crops.map((c) => mapLocations(c, 3, 3, flip));
        const withInv = vicreglLoss([z1!, z2!], [m0, m1], { alpha: 0, numMatches: [9, 9], locations });
        const noInv = vicreglLoss([z1!, z2!], [m0, m1], { alpha: 0, numMatches: [9, 9], locations, invWeight: 0 });
        const featuresOnly = vicreglLoss([z1!, z2!], [m0, m1], { alpha: 0, numMatches: [9, 9] });
        const featuresOnlyNoInv = vicreglLoss([z1!, z2!], [m0, m1], { alpha: 0, numMatches: [9, 9], invWeight: 0 });
        // The invariance term of the location half: total invariance minus the feature half's.
        return value(withInv.loss) - value(noInv.loss) - (value(featuresOnly.loss) - value(featuresOnlyNoInv.loss));
      });
    assert.ok(Math.abs(local(true)) < 1e-5, `mirrored grids: the location half's invariance is ${local(true)}`);
    assert.ok(local(false) > 0.1, `unmirrored grids (the reference's --no-flip-grid 1): ${local(false)}`);
    tf.dispose([z1!, z2!, map, mirrored, m0, m1]);
  });

  it('a step without crop geometry is refused in one line naming the way out; locationMatching=false trains by features alone', () => {
    const m = build();
    const views = [8, 8].map((s) => tf.zeros([4, s, s, 1]));
    const labels = tf.tensor1d([0, 1, 2, 0], 'int32');
    assert.throws(() => m.trainingStep(views, labels), /carries no crop geometry.*locationMatching=false/);
    m.dispose();
    const featuresOnly = build({ locationMatching: false });
    const out = featuresOnly.trainingStep(views, labels);
    assert.ok(Number.isFinite(value(out.loss)));
    tf.dispose([out.loss, ...Object.values(out.metrics), ...views, labels]);
    featuresOnly.dispose();
  });
});
