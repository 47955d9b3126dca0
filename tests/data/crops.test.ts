import assert from 'node:assert/strict';
import { UserError } from '../../src/core/errors.js';
import { Rng } from '../../src/core/random.js';
import {
  augmentBatch,
  augmentView,
  byolViews,
  cropViews,
  defaultCrops,
  formatCrops,
  localCropSize,
  MultiViewLoader,
  parseCrops,
  RandomSampler,
  resolveCrops,
  syntheticDataset,
  TWO_GLOBAL_CROPS,
  validateCrops,
  viewsFor,
  type CropPolicy,
  type MultiViewBatch,
  type ViewAugmentation,
  type ViewRecipe,
} from '../../src/data/index.js';
import { DistributedSampler } from '../../src/distributed/sampler.js';
import { buildConfig } from '../../src/experiment/config.js';
import { prepareExperiment } from '../../src/experiment/experiment.js';
import { BUILT_IN_METHODS, getMethodClass } from '../../src/methods/registry.js';

const MULTI_CROP: CropPolicy = { globalCrops: 2, multiCrop: true, defaultLocalCrops: 6 };
const RECIPES: ViewRecipe[] = ['simclr', 'symmetric_weak', 'byol', 'barlow', 'vicreg', 'ressl'];

/** `fn` throws a UserError whose message is exactly one line matching `pattern`. */
function assertUserError(fn: () => unknown, pattern: RegExp): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof UserError, `a UserError, got ${String(e)}`);
    assert.ok(!e.message.includes('\n'), 'one line');
    assert.match(e.message, pattern);
    return true;
  });
}

async function collect(loader: MultiViewLoader, epoch: number): Promise<MultiViewBatch[]> {
  const out: MultiViewBatch[] = [];
  try {
    for await (const b of loader.batches(epoch)) out.push(b);
  } finally {
    await loader.close();
  }
  return out;
}

describe('data/crops: parsing and validation', () => {
  it('parses NxS:lo-hi groups, global first, from the flag text and from a YAML list', () => {
    const groups = [
      { count: 2, size: 28, scale: [0.14, 1] },
      { count: 6, size: 12, scale: [0.05, 0.14] },
    ];
    assert.deepEqual(parseCrops('2x28:0.14-1,6x12:0.05-0.14'), groups);
    assert.deepEqual(parseCrops(' 2x28:0.14-1 , 6x12:.05-0.14 '), groups);
    assert.deepEqual(
      parseCrops([
        { count: 2, size: 28, scale: [0.14, 1] },
        { count: 6, size: 12, scale: [0.05, 0.14] },
      ]),
      groups,
    );
    assert.deepEqual(parseCrops('1x8:1-1'), [{ count: 1, size: 8, scale: [1, 1] }]);
    assert.equal(formatCrops(parseCrops('2x28:0.14-1,6x12:0.05-0.14,4x16:0.1-0.3')), '2x28:0.14-1,6x12:0.05-0.14,4x16:0.1-0.3');
  });

  it('refuses bad syntax, zero crops or size, and scale ranges outside (0, 1] or reversed, naming the flag and the value', () => {
    const syntax =
      'expected comma-separated groups NxS:lo-hi (N crops of S x S px covering lo to hi of the image area; the first group are the global crops), e.g. 2x28:0.14-1,6x12:0.05-0.14';
    for (const [text, group] of [
      ['2x28', '2x28'],
      ['2x28:0.2', '2x28:0.2'],
      ['ax28:0.2-1', 'ax28:0.2-1'],
      ['2*28:0.2-1', '2*28:0.2-1'],
      ['2x28:0.2-1,', ''],
      ['2x28:0.2-1;6x12:0.05-0.14', '2x28:0.2-1;6x12:0.05-0.14'],
      ['2x28:-0.2-1', '2x28:-0.2-1'],
      ['2x28:1e-2-1', '2x28:1e-2-1'],
      ['', ''],
    ]) {
      assert.throws(
        () => parseCrops(text),
        (e: unknown) => e instanceof UserError && e.message === `--crops: ${JSON.stringify(group)} is not allowed; ${syntax}`,
        text,
      );
    }
    assertUserError(() => parseCrops('0x28:0.2-1'), /^--crops: "0x28:0\.2-1" is not allowed; expected a crop count N >= 1 in each group$/);
    assertUserError(() => parseCrops('2x28:0.2-1,0x12:0.05-0.14'), /^--crops: "0x12:0\.05-0\.14" is not allowed; expected a crop count N >= 1/);
    assertUserError(() => parseCrops('2x0:0.2-1'), /^--crops: "2x0:0\.2-1" is not allowed; expected a crop size S >= 1 px in each group$/);
    assertUserError(() => parseCrops('2x28:0-1'), /^--crops: "2x28:0-1" is not allowed; expected a scale range lo-hi with 0 < lo <= hi <= 1$/);
    assertUserError(() => parseCrops('2x28:0.2-1.5'), /^--crops: "2x28:0\.2-1\.5" is not allowed; expected a scale range lo-hi with 0 < lo <= hi <= 1$/);
    assertUserError(() => parseCrops('2x28:0.5-0.2'), /^--crops: "2x28:0\.5-0\.2" is not allowed; expected a scale range lo-hi with 0 < lo <= hi <= 1$/);
    // the YAML list form
    assertUserError(
      () => parseCrops([{ count: 2, size: 28 }]),
      /^crops\[0\]: \{"count":2,"size":28\} is not allowed; expected a mapping \{count: N, size: S, scale: \[lo, hi\]\}$/,
    );
    assertUserError(() => parseCrops([{ count: 2, size: 28, scale: [0.2, 1], ratio: 1 }]), /^crops\[0\]: .* is not allowed; expected a mapping/);
    assertUserError(() => parseCrops([{ count: 2, size: 28, scale: [0.2, 1] }, 'x']), /^crops\[1\]: "x" is not allowed; expected a mapping/);
    assertUserError(() => parseCrops([{ count: 2.5, size: 28, scale: [0.2, 1] }]), /^crops\[0\]: .* expected a crop count N >= 1/);
    assertUserError(() => parseCrops([{ count: 2, size: 28, scale: [0.3, 0.2] }]), /^crops\[0\]: .* expected a scale range lo-hi with 0 < lo <= hi <= 1$/);
    assertUserError(() => parseCrops([]), /^--crops: \[\] is not allowed; expected comma-separated groups/);
    assertUserError(
      () => parseCrops(5),
      /^--crops: 5 is not allowed; expected comma-separated groups .* or a YAML list of \{count, size, scale: \[lo, hi\]\}$/,
    );
  });

  it('checks the crops against the image size and what the method takes', () => {
    const check = (text: string, policy: CropPolicy) => validateCrops(parseCrops(text), policy, 'byol', 28);
    check('2x28:0.2-1', TWO_GLOBAL_CROPS);
    check('2x20:0.3-1', TWO_GLOBAL_CROPS);
    check('2x28:0.14-1,6x12:0.05-0.14', MULTI_CROP);
    check('2x28:0.14-1,4x16:0.1-0.3,4x12:0.05-0.14', MULTI_CROP);
    assertUserError(
      () => check('2x32:0.2-1', TWO_GLOBAL_CROPS),
      /^--crops: "2x32:0\.2-1" is not allowed; expected crop sizes of at most the image size 28 px \(group 2x32:0\.2-1\)$/,
    );
    assertUserError(() => check('2x28:0.14-1,6x29:0.05-0.14', MULTI_CROP), /expected crop sizes of at most the image size 28 px \(group 6x29:0\.05-0\.14\)$/);
    assertUserError(
      () => check('3x28:0.2-1', TWO_GLOBAL_CROPS),
      /^--crops: "3x28:0\.2-1" is not allowed; expected exactly 2 global crops \(the first group\) for method 'byol', e\.g\. 2x28:0\.2-1$/,
    );
    assertUserError(() => check('1x28:0.2-1,6x12:0.05-0.14', MULTI_CROP), /expected exactly 2 global crops \(the first group\) for method 'byol'/);
    assertUserError(
      () => check('2x28:0.14-1,6x12:0.05-0.14', TWO_GLOBAL_CROPS),
      /^--crops: "2x28:0\.14-1,6x12:0\.05-0\.14" is not allowed; expected one group of 2 global crops for method 'byol', e\.g\. 2x28:0\.14-1: its loss compares exactly 2 views and takes no local crops$/,
    );
  });

  it('every built-in method declares its crops: 2 global (mae: 1, fastsiam: 4, mmcr: 8, ijepa: 1) and no local ones, but for the multi-crop methods (swav, dino, simdino, msn, vicregl, ibot, dinov2: 2 global; lejepa: 4)', () => {
    const globalCrops: Record<string, number> = { mae: 1, fastsiam: 4, mmcr: 8, ijepa: 1 };
    const multiCrop = BUILT_IN_METHODS.filter((name) => getMethodClass(name).crops.multiCrop);
    assert.deepEqual([...multiCrop].sort(), ['dino', 'dinov2', 'ibot', 'lejepa', 'msn', 'simdino', 'swav', 'vicregl']);
    for (const name of BUILT_IN_METHODS) {
      const cls = getMethodClass(name);
      const global = cls.crops.globalCrops;
      if (cls.crops.multiCrop) {
        assert.equal(global, name === 'lejepa' ? 4 : 2, name);
        continue;
      }
      assert.deepEqual(cls.crops, name in globalCrops ? { globalCrops: globalCrops[name], multiCrop: false } : TWO_GLOBAL_CROPS, name);
      assertUserError(
        () => prepareExperiment(buildConfig({ method: name, syntheticSize: 64, crops: `${global}x28:0.14-1,6x12:0.05-0.14` })),
        new RegExp(`^--crops: .* for method '${name}', .*takes no local crops$`),
      );
    }
  });
});

describe('data/crops: views', () => {
  const gray28 = syntheticDataset({ split: 'train', seed: 2, size: 40, imageSize: 28 });
  const rgb32 = syntheticDataset({ split: 'train', seed: 3, size: 8, imageSize: 32, channels: 3 });
  const rgb96 = syntheticDataset({ split: 'train', seed: 4, size: 8, imageSize: 96, channels: 3 });

  it("the default crops of a two-view method are its recipe's views, unchanged (every recipe, small and large images)", () => {
    for (const ds of [gray28, rgb32, rgb96]) {
      for (const recipe of RECIPES) {
        const views = viewsFor(recipe, ds);
        const resolved = resolveCrops(undefined, TWO_GLOBAL_CROPS, 'm', views, ds.height);
        assert.deepEqual(resolved.views, views, `${recipe} at ${ds.height} px`);
        assert.deepEqual(resolved.crops, [{ count: 2, size: ds.height, scale: views[0].cropScale }]);
      }
    }
  });

  it('every built-in method trains on bit-identical batches with its default crops (the experiment path) and with its recipe views', () => {
    for (const name of BUILT_IN_METHODS) {
      const experiment = prepareExperiment(buildConfig({ method: name, syntheticSize: 64 }));
      const global = getMethodClass(name).crops.globalCrops;
      // Global crop k is the recipe's view k mod its views (LeJEPA's 4 of SimCLR's 2); a multi-crop method's default local crops follow them.
      const views = viewsFor(getMethodClass(name).viewRecipe, experiment.train);
      const recipe = Array.from({ length: global }, (_, k) => views[k % views.length]!);
      assert.deepEqual(experiment.views.slice(0, global), recipe, name);
      const indices = [5, 0, 63, 17];
      const a = augmentBatch(experiment.train, experiment.views, 3, 2, indices);
      const b = augmentBatch(experiment.train, recipe, 3, 2, indices);
      assert.equal(b.views.length, global);
      b.views.forEach((view, v) => assert.deepEqual(a.views[v], view, `${name} view ${v}`));
      b.crops.forEach((crop, v) => assert.deepEqual(a.crops[v], crop, `${name} crop ${v}`));
    }
  });

  it('global crops take the recipe views in turn (asymmetric settings kept); local crops take view 0 without blur and solarisation', () => {
    const recipe = byolViews(rgb96); // view 0: blur 1.0, solarisation 0; view 1: blur 0.1, solarisation 0.2
    const views = cropViews(recipe, parseCrops('2x80:0.14-1,3x40:0.05-0.14,1x24:0.1-0.2'));
    assert.equal(views.length, 6);
    assert.deepEqual(views[0], { ...recipe[0], cropSize: 80, cropScale: [0.14, 1] });
    assert.deepEqual(views[1], { ...recipe[1], cropSize: 80, cropScale: [0.14, 1] });
    assert.equal(views[0].gaussianBlurProb, 1.0);
    assert.equal(views[1].solarizationProb, 0.2);
    for (const [v, size, scale] of [
      [2, 40, [0.05, 0.14]],
      [3, 40, [0.05, 0.14]],
      [4, 40, [0.05, 0.14]],
      [5, 24, [0.1, 0.2]],
    ] as const) {
      assert.deepEqual(views[v], { ...recipe[0], cropSize: size, cropScale: scale, gaussianBlurProb: 0, solarizationProb: 0 });
    }
    // three global crops of a two-view recipe cycle through it
    const three = cropViews(recipe, parseCrops('3x96:0.2-1'));
    assert.equal(three[2].solarizationProb, recipe[0].solarizationProb);
    assert.equal(three[2].gaussianBlurProb, recipe[0].gaussianBlurProb);
  });

  it("default local crops: round(S * 96 / 224) px, SwAV's scale 0.05-0.14, for a multi-crop method", () => {
    assert.deepEqual(
      [28, 32, 64, 96, 224].map((s) => localCropSize(s)),
      [12, 14, 27, 41, 96],
    );
    const recipe = viewsFor('simclr', gray28);
    assert.equal(formatCrops(defaultCrops(MULTI_CROP, recipe)), '2x28:0.2-1,6x12:0.05-0.14');
    assert.equal(
      formatCrops(defaultCrops({ ...MULTI_CROP, defaultLocalCrops: 4, localScale: [0.05, 0.4] }, viewsFor('simclr', rgb32))),
      '2x32:0.08-1,4x14:0.05-0.4',
    );
    const { views } = resolveCrops(undefined, MULTI_CROP, 'm', recipe, 28);
    assert.deepEqual(
      views.map((v) => v.cropSize),
      [28, 28, 12, 12, 12, 12, 12, 12],
    );
  });
});

describe('data/crops: keyed multi-crop batches', () => {
  const ds = syntheticDataset({ split: 'train', seed: 5, size: 96, imageSize: 28 });
  const views: ViewAugmentation[] = cropViews(byolViews(ds), parseCrops('2x28:0.14-1,4x12:0.05-0.14,2x16:0.1-0.3'));
  const sizes = views.map((v) => v.cropSize);
  const bytes = 28 * 28;

  it('view v of sample i is keyed (seed, epoch, i, v): the same crop whatever the batch composition', () => {
    const a = augmentBatch(ds, views, 7, 1, [3, 9]).views;
    const b = augmentBatch(ds, views, 7, 1, [9, 40, 1, 3]).views;
    views.forEach((view, v) => {
      const n = sizes[v] * sizes[v];
      assert.equal(a[v].length, 2 * n);
      const expected = augmentView(ds.pixels, 3 * bytes, 28, 28, 1, view, Rng.keyed(7, 1, 3, v));
      assert.deepEqual(a[v].subarray(0, n), expected);
      assert.deepEqual(b[v].subarray(3 * n, 4 * n), expected);
      assert.deepEqual(a[v].subarray(n, 2 * n), b[v].subarray(0, n));
    });
    // local crops of one sample differ from each other (own keys), and from another epoch's
    assert.notDeepEqual(a[2].subarray(0, 144), a[3].subarray(0, 144));
    assert.notDeepEqual(augmentBatch(ds, views, 7, 2, [3]).views[2], a[2].subarray(0, 144));
  });

  it('the loader gives the same multi-crop batches inline and with 1 or 2 workers, one [B, S_v, S_v, C] array per view', async () => {
    const make = (workers: number) => new MultiViewLoader({ dataset: ds, views, batchSize: 20, sampler: new RandomSampler(96, 4), seed: 11, workers });
    const inline = await collect(make(0), 3);
    assert.equal(inline.length, 5);
    for (const batch of inline) {
      const B = batch.indices.length;
      assert.deepEqual(
        batch.shapes,
        sizes.map((s) => [B, s, s, 1]),
      );
      assert.deepEqual(batch.shape, [B, 28, 28, 1]);
      batch.views.forEach((v, i) => assert.equal(v.length, B * sizes[i] * sizes[i]));
    }
    for (const workers of [1, 2]) {
      const threaded = await collect(make(workers), 3);
      assert.equal(threaded.length, inline.length);
      threaded.forEach((batch, b) => {
        assert.deepEqual(batch.indices, inline[b].indices);
        assert.deepEqual(batch.shapes, inline[b].shapes);
        assert.deepEqual(batch.views, inline[b].views, `batch ${b} with ${workers} workers`);
      });
    }
  });

  it('W ranks with the distributed sampler get exactly the one-process crops of their samples (2 and 3 ranks, different samples each)', async () => {
    for (const worldSize of [2, 3]) {
      const localBatch = 24 / worldSize;
      const one = await collect(new MultiViewLoader({ dataset: ds, views, batchSize: 24, sampler: new RandomSampler(96, 6), seed: 2, dropLast: true }), 1);
      const ranks = await Promise.all(
        Array.from({ length: worldSize }, (_, rank) =>
          collect(
            new MultiViewLoader({
              dataset: ds,
              views,
              batchSize: localBatch,
              sampler: new DistributedSampler({ length: 96, seed: 6, rank, worldSize, localBatch }),
              seed: 2,
              dropLast: true,
              workers: rank % 2,
            }),
            1,
          ),
        ),
      );
      assert.equal(one.length, 4);
      one.forEach((batch, b) => {
        const shards = ranks.map((r) => r[b]);
        assert.equal(new Set(shards.flatMap((s) => Array.from(s.indices))).size, 24, 'every rank has different samples');
        assert.deepEqual(
          shards.flatMap((s) => Array.from(s.indices)),
          Array.from(batch.indices),
        );
        views.forEach((_, v) => {
          const joined = new Float32Array(shards.reduce((n, s) => n + s.views[v].length, 0));
          let offset = 0;
          for (const s of shards) {
            joined.set(s.views[v], offset);
            offset += s.views[v].length;
          }
          assert.deepEqual(joined, batch.views[v], `${worldSize} ranks, batch ${b}, view ${v}`);
        });
      });
    }
  });
});
