import assert from 'node:assert/strict';
import { UserError } from '../../src/core/errors.js';
import { Rng } from '../../src/core/random.js';
import {
  adjustHue,
  augmentBatch,
  augmentView,
  augmentViewInto,
  byolViews,
  CROP_FIELDS,
  barlowViews,
  evalTransform,
  evalView,
  gaussianBlur,
  hflip,
  symmetricWeakViews,
  randomResizedCropBox,
  resizeBilinear,
  resslViews,
  simclrViews,
  syntheticDataset,
  validateViewAugmentation,
  viewsFor,
  type ViewAugmentation,
} from '../../src/data/index.js';

/** A view that changes nothing: full-image crop, no random ops, mean 0 std 1. */
function identityView(size: number, c: number, extra: Partial<ViewAugmentation> = {}): ViewAugmentation {
  return {
    cropSize: size,
    cropScale: [1, 1],
    cropRatio: [1, 1],
    hflipProb: 0,
    colorJitterProb: 0,
    brightness: 0,
    contrast: 0,
    saturation: 0,
    hue: 0,
    grayscaleProb: 0,
    gaussianBlurProb: 0,
    solarizationProb: 0,
    mean: new Array(c).fill(0),
    std: new Array(c).fill(1),
    ...extra,
  };
}

/** A deterministic pseudo-random image [h, w, c] with values in [lo, hi]. */
function image(h: number, w: number, c: number, lo = 0, hi = 255, seed = 1): Uint8Array {
  const rng = new Rng(seed);
  return Uint8Array.from({ length: h * w * c }, () => lo + rng.int(hi - lo + 1));
}

function close(a: ArrayLike<number>, b: ArrayLike<number>, tol = 1e-6): void {
  assert.equal(a.length, b.length);
  for (let i = 0; i < a.length; i++) {
    assert.ok(Math.abs(a[i] - b[i]) <= tol, `index ${i}: ${a[i]} vs ${b[i]}`);
  }
}

const run = (px: Uint8Array, h: number, w: number, c: number, aug: ViewAugmentation, key = [1, 0, 0, 0]) => augmentView(px, 0, h, w, c, aug, Rng.keyed(...key));

describe('data/augment closed forms', () => {
  it('crop with scale (1,1) and ratio (1,1) is the identity; normalisation is (x/255 - mean)/std', () => {
    const px = image(6, 6, 3);
    close(
      run(px, 6, 6, 3, identityView(6, 3)),
      Array.from(px, (v) => v / 255),
    );
    const out = run(px, 6, 6, 3, identityView(6, 3, { mean: [0.5, 0.4, 0.3], std: [0.25, 0.5, 2] }));
    close(
      out,
      Array.from(px, (v, i) => (v / 255 - [0.5, 0.4, 0.3][i % 3]) / [0.25, 0.5, 2][i % 3]),
      1e-5,
    );
    // a one-element mean/std broadcasts
    close(
      run(px, 6, 6, 3, identityView(6, 3, { mean: [0.5], std: [0.5] })),
      Array.from(px, (v) => (v / 255 - 0.5) / 0.5),
      1e-5,
    );
  });

  it('resizing keeps constant images constant and doubling a 2x2 image is bilinear', () => {
    const px = new Uint8Array(5 * 7).fill(100);
    close(run(px, 5, 7, 1, identityView(9, 1, { cropRatio: [7 / 5, 7 / 5] })), new Array(81).fill(100 / 255), 1e-6);
    // 2x2 -> 4x4 with half-pixel centers: row [a, b] -> [a, .75a+.25b, .25a+.75b, b]
    const tiny = Uint8Array.from([0, 200, 40, 120]);
    const up = run(tiny, 2, 2, 1, identityView(4, 1));
    const row0 = [0, 50, 150, 200].map((v) => v / 255);
    close(up.subarray(0, 4), row0, 1e-6);
    const row1 = [0.75 * 0 + 0.25 * 40, 0, 0, 0.75 * 200 + 0.25 * 120];
    close([up[4], up[7]], [row1[0] / 255, row1[3] / 255], 1e-6);
  });

  it('hflip mirrors each row', () => {
    const px = image(5, 5, 3);
    const out = run(px, 5, 5, 3, identityView(5, 3, { hflipProb: 1 }));
    const expected: number[] = [];
    for (let y = 0; y < 5; y++) {
      for (let x = 0; x < 5; x++) for (let c = 0; c < 3; c++) expected.push(px[(y * 5 + (4 - x)) * 3 + c] / 255);
    }
    close(out, expected);
  });

  it('brightness scales every value by one factor in [1-b, 1+b]', () => {
    const px = image(5, 5, 3, 10, 150);
    const factors = new Set<string>();
    for (let k = 0; k < 5; k++) {
      const out = run(px, 5, 5, 3, identityView(5, 3, { colorJitterProb: 1, brightness: 0.5 }), [1, 0, k, 0]);
      const f = out[0] / (px[0] / 255);
      assert.ok(f >= 0.5 && f <= 1.5, `factor ${f}`);
      close(
        out,
        Array.from(px, (v) => Math.min(1, (v / 255) * f)),
        1e-5,
      );
      factors.add(f.toFixed(4));
    }
    assert.ok(factors.size > 1);
  });

  it('contrast blends with the mean gray value: out - m = f (x - m)', () => {
    const px = image(4, 4, 1, 90, 160);
    const out = run(px, 4, 4, 1, identityView(4, 1, { colorJitterProb: 1, contrast: 0.5 }));
    const x = Array.from(px, (v) => v / 255);
    const m = x.reduce((s, v) => s + v, 0) / x.length;
    const f = (out[0] - m) / (x[0] - m);
    assert.ok(f >= 0.5 && f <= 1.5);
    close(
      out,
      x.map((v) => m + f * (v - m)),
      1e-5,
    );
  });

  it('grayscale uses luma weights 0.299/0.587/0.114 and keeps 3 channels; no-op on 1 channel', () => {
    const px = image(3, 3, 3);
    const out = run(px, 3, 3, 3, identityView(3, 3, { grayscaleProb: 1 }));
    const expected: number[] = [];
    for (let i = 0; i < px.length; i += 3) {
      const l = (0.299 * px[i] + 0.587 * px[i + 1] + 0.114 * px[i + 2]) / 255;
      expected.push(l, l, l);
    }
    close(out, expected, 1e-6);
    const g = image(3, 3, 1);
    close(
      run(g, 3, 3, 1, identityView(3, 1, { grayscaleProb: 1, colorJitterProb: 1, saturation: 0.9, hue: 0.5 })),
      Array.from(g, (v) => v / 255),
    );
  });

  it('saturation blends each pixel with its luma', () => {
    const px = image(3, 3, 3, 100, 160);
    const out = run(px, 3, 3, 3, identityView(3, 3, { colorJitterProb: 1, saturation: 0.5 }));
    const x = Array.from(px, (v) => v / 255);
    const luma = (a: ArrayLike<number>, i: number) => 0.299 * a[i] + 0.587 * a[i + 1] + 0.114 * a[i + 2];
    const f = (out[0] - luma(x, 0)) / (x[0] - luma(x, 0));
    assert.ok(f >= 0.5 && f <= 1.5);
    for (let i = 0; i < x.length; i += 3) {
      const l = luma(x, i);
      close(
        out.subarray(i, i + 3),
        [0, 1, 2].map((k) => l + f * (x[i + k] - l)),
        1e-5,
      );
    }
  });

  it('hue rotates the colour circle (RGB <-> HSV)', () => {
    const img = Float32Array.from([1, 0, 0, 0.5, 0.5, 0.5, 0.8, 0.4, 0.2]);
    const a = img.slice();
    adjustHue(a, 3, 1 / 3);
    close(a.subarray(0, 3), [0, 1, 0], 1e-6); // red -> green
    close(a.subarray(3, 6), [0.5, 0.5, 0.5], 0); // gray unchanged
    adjustHue(a, 3, -1 / 3);
    close(a, img, 1e-6);
    const b = img.slice();
    adjustHue(b, 3, 0.5);
    close(b.subarray(0, 3), [0, 1, 1], 1e-6); // red -> cyan
    // value (max) and saturation are preserved
    assert.ok(Math.abs(Math.max(b[6], b[7], b[8]) - 0.8) < 1e-6);
    assert.ok(Math.abs(Math.min(b[6], b[7], b[8]) - 0.2) < 1e-6);
  });

  it('solarization inverts values >= 0.5', () => {
    const px = Uint8Array.from([0, 100, 127, 128, 200, 255, 64, 192, 30]);
    const out = run(px, 3, 3, 1, identityView(3, 1, { solarizationProb: 1 }));
    close(
      out,
      Array.from(px, (v) => (v >= 128 ? 1 - v / 255 : v / 255)),
    );
    assert.ok(Math.abs(out[3] - 127 / 255) < 1e-6 && Math.abs(out[2] - 127 / 255) < 1e-6);
  });

  it('gaussian blur keeps constant images and blurs an impulse symmetrically', () => {
    const flat = new Float32Array(5 * 5 * 3).fill(0.3);
    gaussianBlur(flat, 5, 5, 3, 1.2);
    close(flat, new Array(75).fill(0.3), 1e-6);
    const n = 15;
    const at = (y: number, x: number) => imp[y * n + x];
    const imp = new Float32Array(n * n);
    imp[7 * n + 7] = 1;
    gaussianBlur(imp, n, n, 1, 1);
    // separable normalised Gaussian: center weight (1 / sum_k exp(-k^2/2))^2 over |k| <= 3
    let z = 0;
    for (let k = -3; k <= 3; k++) z += Math.exp(-(k * k) / 2);
    assert.ok(Math.abs(at(7, 7) - 1 / (z * z)) < 1e-6);
    assert.ok(Math.abs(at(7, 6) - Math.exp(-0.5) / (z * z)) < 1e-6);
    assert.ok(at(7, 6) === at(7, 8) && at(6, 7) === at(8, 7) && Math.abs(at(7, 6) - at(6, 7)) < 1e-7);
    const total = imp.reduce((s, v) => s + v, 0);
    assert.ok(Math.abs(total - 1) < 1e-5);
  });

  it('random resized crop boxes lie inside the image with area and ratio in range', () => {
    for (let k = 0; k < 300; k++) {
      const box = randomResizedCropBox(28, 28, [0.08, 1], [3 / 4, 4 / 3], Rng.keyed(k));
      assert.ok(box.top >= 0 && box.left >= 0 && box.top + box.height <= 28 && box.left + box.width <= 28);
      const frac = (box.height * box.width) / (28 * 28);
      assert.ok(frac > 0.05 && frac <= 1, `area ${frac}`);
      const ratio = box.width / box.height;
      assert.ok(ratio > 0.6 && ratio < 1.6, `ratio ${ratio}`);
    }
  });
});

describe('data/augment determinism', () => {
  const ds = syntheticDataset({ split: 'train', seed: 0, size: 20, channels: 3 });
  const [v0, v1] = simclrViews(ds);

  it('same (seed, epoch, index, view) gives identical output; other view/epoch differ', () => {
    const at = (view: ViewAugmentation, key: number[]) => augmentView(ds.pixels, 5 * 768, 16, 16, 3, view, Rng.keyed(...key));
    const a = at(v0, [7, 2, 5, 0]);
    assert.deepEqual(at(v0, [7, 2, 5, 0]), a);
    assert.notDeepEqual(at(v1, [7, 2, 5, 1]), a);
    assert.notDeepEqual(at(v0, [7, 3, 5, 0]), a);
    assert.notDeepEqual(at(v0, [8, 2, 5, 0]), a);
  });

  it('a sample gets the same views whatever the batch composition', () => {
    const a = augmentBatch(ds, [v0, v1], 7, 1, [3, 9]).views;
    const b = augmentBatch(ds, [v0, v1], 7, 1, [9, 0, 1, 3]).views;
    const n = 16 * 16 * 3;
    for (let v = 0; v < 2; v++) {
      assert.deepEqual(a[v].subarray(n, 2 * n), b[v].subarray(0, n));
      assert.deepEqual(a[v].subarray(0, n), b[v].subarray(3 * n, 4 * n));
      assert.deepEqual(a[v].subarray(0, n), augmentView(ds.pixels, 3 * n, 16, 16, 3, [v0, v1][v], Rng.keyed(7, 1, 3, v)));
    }
  });

  it('outputs [S, S, C] with roughly standardised values under the recipe', () => {
    const out = augmentBatch(
      ds,
      [v0],
      0,
      0,
      Array.from({ length: 20 }, (_, i) => i),
    ).views[0];
    assert.equal(out.length, 20 * 16 * 16 * 3);
    assert.ok(out.every(Number.isFinite));
    const m = out.reduce((s, v) => s + v, 0) / out.length;
    assert.ok(Math.abs(m) < 1, `mean ${m}`);
    const big = augmentView(ds.pixels, 0, 16, 16, 3, { ...v0, cropSize: 24 }, Rng.keyed(0));
    assert.equal(big.length, 24 * 24 * 3);
  });
});

describe('data/augment crop geometry', () => {
  const ds = syntheticDataset({ split: 'train', seed: 2, size: 12, imageSize: 20, channels: 3 });
  const n = 20 * 20 * 3;
  const indices = [4, 0, 11, 7, 2];
  const views: ViewAugmentation[] = [
    { ...simclrViews(ds)[0], cropSize: 12 },
    { ...byolViews(ds)[1], cropSize: 8, cropScale: [0.1, 0.5] },
  ];

  it('augmentBatch reports, per view, [B, 5] rows (top, left, height, width, flipped) equal to what augmentViewInto returns for the same key', () => {
    assert.equal(CROP_FIELDS, 5);
    const { views: out, crops } = augmentBatch(ds, views, 7, 3, indices);
    assert.equal(crops.length, views.length);
    let flips = 0;
    views.forEach((aug, v) => {
      assert.ok(crops[v] instanceof Float32Array);
      assert.equal(crops[v].length, indices.length * CROP_FIELDS);
      const size = aug.cropSize * aug.cropSize * 3;
      indices.forEach((index, k) => {
        const pixels = new Float32Array(size);
        const g = augmentViewInto(ds.pixels, index * n, 20, 20, 3, aug, Rng.keyed(7, 3, index, v), pixels, 0);
        assert.deepEqual(Array.from(crops[v].subarray(k * CROP_FIELDS, (k + 1) * CROP_FIELDS)), [g.top, g.left, g.height, g.width, g.flipped ? 1 : 0]);
        // the geometry's view is the batch's view (same draws)
        assert.deepEqual(out[v].subarray(k * size, (k + 1) * size), pixels);
        // a box inside the 20 x 20 image, integers
        assert.ok([g.top, g.left, g.height, g.width].every(Number.isInteger));
        assert.ok(g.top >= 0 && g.left >= 0 && g.height >= 1 && g.width >= 1 && g.top + g.height <= 20 && g.left + g.width <= 20);
        flips += g.flipped ? 1 : 0;
      });
    });
    assert.ok(flips > 0 && flips < 2 * indices.length, `flipped ${flips} of ${2 * indices.length}: the flip is drawn, not constant`);
  });

  it('the box is the first draws of the key (randomResizedCropBox); flipped is 1 exactly when hflipProb forces it', () => {
    for (const hflipProb of [0, 1]) {
      const forced = views.map((v) => ({ ...v, hflipProb }));
      const { crops } = augmentBatch(ds, forced, 5, 0, indices);
      forced.forEach((aug, v) => {
        indices.forEach((index, k) => {
          const box = randomResizedCropBox(20, 20, aug.cropScale, aug.cropRatio ?? [3 / 4, 4 / 3], Rng.keyed(5, 0, index, v));
          const row = Array.from(crops[v].subarray(k * CROP_FIELDS, (k + 1) * CROP_FIELDS));
          assert.deepEqual(row, [box.top, box.left, box.height, box.width, hflipProb], `view ${v} sample ${index}`);
        });
      });
    }
  });

  it('the view is the reported box resized to S, mirrored where flipped is 1 (pixels recomputed from the geometry)', () => {
    const plain = identityView(6, 3, { cropScale: [0.2, 0.7], cropRatio: [0.5, 2], hflipProb: 0.5 });
    const keys = Array.from({ length: 12 }, (_, i) => i);
    const { views: out, crops } = augmentBatch(ds, [plain], 4, 1, keys);
    const size = 6 * 6 * 3;
    const flips = new Set<number>();
    keys.forEach((index, k) => {
      const [top, left, height, width, flipped] = crops[0].subarray(k * CROP_FIELDS, (k + 1) * CROP_FIELDS);
      const expected = new Float32Array(size);
      resizeBilinear(ds.pixels, index * n, 20, 3, { top, left, height, width }, 6, 6, expected, 1 / 255);
      if (flipped === 1) hflip(expected, 6, 6, 3);
      flips.add(flipped);
      assert.deepEqual(out[0].subarray(k * size, (k + 1) * size), expected, `sample ${index}`);
    });
    assert.deepEqual([...flips].sort(), [0, 1], 'both flipped and unflipped views occur');
  });
});

describe('data/augment presets and validation', () => {
  const gray = syntheticDataset({ split: 'test', size: 10 });

  it('simclrViews: two identical solo-learn SimCLR views, no blur on small images', () => {
    const views = simclrViews(gray);
    assert.equal(views.length, 2);
    assert.deepEqual(views[0], views[1]);
    const v = views[0];
    assert.equal(v.cropSize, 16);
    assert.deepEqual([v.brightness, v.contrast, v.saturation, v.hue, v.colorJitterProb], [0.8, 0.8, 0.8, 0.2, 0.8]);
    assert.deepEqual([v.grayscaleProb, v.hflipProb, v.gaussianBlurProb, v.solarizationProb], [0.2, 0.5, 0, 0]);
    assert.deepEqual(v.cropScale, [0.2, 1]);
    assert.equal(v.mean.length, 1);
    assert.equal(simclrViews(gray, 96)[0].gaussianBlurProb, 0.5);
  });

  it('byolViews / barlowViews: the asymmetric recipe', () => {
    for (const views of [byolViews(gray), barlowViews(gray)]) {
      assert.equal(views.length, 2);
      assert.deepEqual([views[0].gaussianBlurProb, views[0].solarizationProb], [0, 0]);
      assert.deepEqual([views[1].gaussianBlurProb, views[1].solarizationProb], [0, 0.2]);
      assert.deepEqual([views[0].brightness, views[0].contrast, views[0].saturation, views[0].hue], [0.4, 0.4, 0.2, 0.1]);
    }
    const large = byolViews(gray, 128);
    assert.deepEqual([large[0].gaussianBlurProb, large[0].solarizationProb], [1, 0]);
    assert.deepEqual([large[1].gaussianBlurProb, large[1].solarizationProb], [0.1, 0.2]);
    const over = byolViews(gray, undefined, { overrides: { cropScale: [0.5, 1] } });
    assert.deepEqual(over[1].cropScale, [0.5, 1]);
    assert.equal(over[1].solarizationProb, 0.2);
  });

  it('symmetricWeakViews: two identical views, weaker jitter than SimCLR (solo-learn symmetric_weak), blur only on large crops', () => {
    const views = symmetricWeakViews(gray);
    assert.equal(views.length, 2);
    assert.deepEqual(views[0], views[1]);
    const v = views[0];
    assert.deepEqual([v.brightness, v.contrast, v.saturation, v.hue, v.colorJitterProb], [0.4, 0.4, 0.4, 0.1, 0.8]);
    assert.deepEqual([v.grayscaleProb, v.hflipProb, v.gaussianBlurProb, v.solarizationProb], [0.2, 0.5, 0, 0]);
    assert.deepEqual(v.cropScale, [0.2, 1]);
    assert.equal(symmetricWeakViews(gray, 96)[1].gaussianBlurProb, 0.5);
    assert.deepEqual(viewsFor('symmetric_weak', gray), views);
  });

  it("resslViews: a strong student view and a weak teacher view (crop and flip only), as solo-learn's ressl.yaml", () => {
    const [strong, weak] = resslViews(gray);
    assert.deepEqual([strong.brightness, strong.contrast, strong.saturation, strong.hue, strong.colorJitterProb], [0.4, 0.4, 0.2, 0.1, 0.8]);
    assert.deepEqual([strong.grayscaleProb, strong.hflipProb, strong.gaussianBlurProb, strong.solarizationProb], [0.2, 0.5, 0, 0]);
    assert.equal(weak.colorJitterProb, 0);
    assert.deepEqual([weak.brightness, weak.contrast, weak.saturation, weak.hue], [0, 0, 0, 0]);
    assert.deepEqual([weak.grayscaleProb, weak.hflipProb, weak.gaussianBlurProb, weak.solarizationProb], [0, 0.5, 0, 0]);
    for (const v of [strong, weak]) {
      assert.equal(v.cropSize, 16);
      assert.deepEqual(v.cropScale, [0.2, 1]);
      assert.deepEqual(v.cropRatio, [3 / 4, 4 / 3]);
      validateViewAugmentation(v, 1);
    }
    assert.notEqual(weak.mean, strong.mean, 'views do not share arrays');
    const [bigStrong, bigWeak] = resslViews(gray, 96);
    assert.deepEqual([bigStrong.gaussianBlurProb, bigWeak.gaussianBlurProb], [0.5, 0]);
    assert.deepEqual(resslViews(gray, undefined, { overrides: { cropScale: [0.5, 1] } })[1].cropScale, [0.5, 1]);
    assert.deepEqual(viewsFor('ressl', gray), resslViews(gray));
    // With a full-image crop, the weak view is the image or its mirror, never recoloured.
    const full: ViewAugmentation = { ...weak, cropScale: [1, 1], cropRatio: [1, 1] };
    const plain = augmentView(gray.pixels, 0, 16, 16, 1, { ...full, hflipProb: 0 }, Rng.keyed(5));
    const mirrored = augmentView(gray.pixels, 0, 16, 16, 1, { ...full, hflipProb: 1 }, Rng.keyed(5));
    assert.notDeepEqual(plain, mirrored);
    for (let key = 0; key < 8; key++) {
      const out = augmentView(gray.pixels, 0, 16, 16, 1, full, Rng.keyed(key));
      assert.ok(
        [plain, mirrored].some((ref) => ref.every((x, i) => x === out[i])),
        `key ${key}`,
      );
    }
  });

  it('validation names the field and what is allowed', () => {
    const v = simclrViews(gray)[0];
    const bad = (patch: Partial<ViewAugmentation>, re: RegExp) =>
      assert.throws(
        () => validateViewAugmentation({ ...v, ...patch }, 1, 'views[0]'),
        (e: Error) => e instanceof UserError && re.test(e.message),
      );
    bad({ cropSize: 0 }, /^views\[0\]\.cropSize: 0/);
    bad({ cropScale: [0.5, 0.2] }, /^views\[0\]\.cropScale/);
    bad({ hflipProb: 1.5 }, /^views\[0\]\.hflipProb: 1\.5 .*probability/);
    bad({ hue: 0.7 }, /^views\[0\]\.hue/);
    bad({ mean: [0.1, 0.2, 0.3] }, /^views\[0\]\.mean/);
    bad({ std: [0] }, /^views\[0\]\.std/);
    validateViewAugmentation(v, 1);
  });

  it('evalView: identity resize then normalise; resize/center crop otherwise', () => {
    const t = evalTransform(gray);
    assert.equal(t.cropSize, 16);
    const out = evalView(gray.pixels, 256, 16, 16, 1, t);
    close(
      out,
      Array.from(gray.pixels.subarray(256, 512), (v) => (v / 255 - t.mean[0]) / t.std[0]),
      1e-5,
    );
    // 4x6 constant image -> shorter side 4 -> 4x6 -> center crop 4x4
    const px = new Uint8Array(24).fill(51);
    const small = evalView(px, 0, 4, 6, 1, { cropSize: 4, mean: [0], std: [1] });
    close(small, new Array(16).fill(0.2), 1e-6);
    // a horizontal ramp, center crop picks the middle columns
    const ramp = Uint8Array.from({ length: 24 }, (_, i) => (i % 6) * 10);
    const c = evalView(ramp, 0, 4, 6, 1, { cropSize: 4, mean: [0], std: [1] });
    close(
      c.subarray(0, 4),
      [10, 20, 30, 40].map((v) => v / 255),
      1e-6,
    );
    // downscale 8x8 -> 4x4 of a constant image stays constant
    const d = evalView(new Uint8Array(64).fill(200), 0, 8, 8, 1, { cropSize: 4, mean: [0], std: [1] });
    close(d, new Array(16).fill(200 / 255), 1e-6);
  });
});
