/**
 * The browser bundle in headless Chromium (Playwright): one method of each family, then every
 * other built-in method, takes two optimizer steps on seeded inputs in a page, on tfjs's JS
 * cpu backend and on WebGPU (SwiftShader), and each step's loss is the one Node computes for
 * the same step on its pure-JS cpu engine. The page makes no request beyond 127.0.0.1.
 */
import { strict as assert } from 'node:assert';
import type { Browser } from 'playwright-core';
import * as zoo from '../../src/browser.js';
import { buildBrowser, launchChromium, openPage, ORIGIN } from './bundle.js';
import { augmentedPixels, smallArgs, stepLosses, type StepSpec } from './steps.js';
import { VIT_MICRO } from '../helpers/vit-micro.js';
import { useCpu } from '../helpers/webgpu.js';

const COMMON = { imageSize: 8, channels: 3, batchSize: 4, steps: 2, seed: 7 };
const HEAD = { projHiddenDim: 16, projOutputDim: 8 };
/**
 * SimCLR (contrastive; on mlp and tiny_resnet), BYOL (momentum), MoCo v2+ (queue), SwAV (clustering) on mlp; MAE and I-JEPA
 * on vit_micro (a 2-block test ViT, tests/helpers/vit-micro.ts: vit_tiny's code; the training page's test runs vit_tiny).
 */
const SPECS: StepSpec[] = [
  { method: 'simclr', backbone: 'mlp', args: HEAD, ...COMMON },
  { method: 'simclr', backbone: 'tiny_resnet', args: HEAD, ...COMMON },
  { method: 'byol', backbone: 'mlp', args: { ...HEAD, predHiddenDim: 16 }, ...COMMON },
  { method: 'mocov2plus', backbone: 'mlp', args: { ...HEAD, queueSize: 8 }, ...COMMON },
  { method: 'swav', backbone: 'mlp', args: { ...HEAD, numPrototypes: 5, queueSize: 0 }, ...COMMON },
  { method: 'mae', backbone: VIT_MICRO, args: { decoderEmbedDim: 32, decoderDepth: 1, decoderNumHeads: 2 }, ...COMMON, patchSize: 4 },
  { method: 'ijepa', backbone: VIT_MICRO, args: { predictorEmbedDim: 12, predictorDepth: 1, contextPatches: 4 }, ...COMMON, imageSize: 16, patchSize: 4 },
];

/**
 * The methods that refuse the mlp: MSN, iBOT and DINOv2 take a ViT (their masked patches: vit_micro), VICRegL a ResNet
 * (its feature maps; batch 4: tfjs's JS cpu backend takes seconds a step of tiny_resnet at batch 12, in the page and in Node).
 */
const NOT_MLP: Record<string, { backbone: string; patchSize?: number; batchSize?: number }> = {
  msn: { backbone: VIT_MICRO, patchSize: 4 },
  ibot: { backbone: VIT_MICRO, patchSize: 4 },
  dinov2: { backbone: VIT_MICRO, patchSize: 4 },
  vicregl: { backbone: 'tiny_resnet', batchSize: 4 },
};

/**
 * Every built-in method but MAE and I-JEPA (a ViT's: above) on the mlp backbone (MSN, iBOT, DINOv2 and VICRegL on theirs,
 * {@link NOT_MLP}), two steps, batch 12 (VICRegL 4), with SGD, LARS and AdamW in turn.
 * W-MSE whitens the whole batch (12 rows, more than its 8 dimensions).
 */
function everyMethodSpecs(): StepSpec[] {
  const optimizers = ['sgd', 'lars', 'adamw'] as const;
  return zoo.BUILT_IN_METHODS.filter((method) => method !== 'mae' && method !== 'ijepa').map((method, i) => ({
    ...{ method, backbone: 'mlp', args: { ...smallArgs(zoo, method), ...(method === 'wmse' ? { whiteningSize: 12 } : {}) } },
    ...{ imageSize: 8, channels: 3, batchSize: 12, steps: 2, seed: 11, optimizer: optimizers[i % 3] },
    ...NOT_MLP[method],
  }));
}

/** Each step's loss, in the page, on `backend`; and the backend the page's engine reports. */
async function pageLosses(
  browser: Browser,
  backend: zoo.BackendChoice,
  specs: StepSpec[] = SPECS,
): Promise<{ engine: string; losses: number[][]; gpuBytes: number; requests: string[] }> {
  const { page, requests, errors } = await openPage(browser);
  try {
    const result = await page.evaluate(
      async ({ specs, backend, origin }) => {
        const lib = (await import(`${origin}/ssl-zoo.js`)) as typeof zoo;
        const { stepLosses: run } = (await import(`${origin}/steps.js`)) as { stepLosses: typeof stepLosses };
        const engine = await lib.initEngine(backend);
        const losses: number[][] = [];
        for (const spec of specs) losses.push(await run(lib, spec));
        // Bytes of tensors in GPU buffers (WebGPU backend only): the steps ran on the GPU.
        const gpuBytes = (lib.tf.memory() as { numBytesInGPU?: number }).numBytesInGPU ?? 0;
        return { engine: engine.backend, losses, gpuBytes };
      },
      { specs, backend, origin: ORIGIN },
    );
    assert.deepEqual(errors, []);
    return { ...result, requests };
  } finally {
    await page.close();
  }
}

/** Asserts `actual` equals `expected` to a relative `tolerance`, per method and step. */
function assertLosses(actual: number[][], expected: number[][], tolerance: number, specs: StepSpec[] = SPECS): void {
  specs.forEach((spec, m) =>
    expected[m].forEach((loss, step) => {
      const got = actual[m][step];
      assert.ok(Math.abs(got - loss) <= tolerance * Math.max(1, Math.abs(loss)), `${spec.method} (${spec.backbone}) step ${step}: page ${got}, Node ${loss}`);
    }),
  );
}

describe('browser bundle in headless Chromium', function () {
  // The WebGPU steps of 26 methods on SwiftShader take about 2 minutes alone, longer beside another test file.
  this.timeout(600_000);
  let browser: Browser;
  let nodeLosses: number[][];
  let everyMethodNodeLosses: number[][] | undefined;

  /** Node's losses (its `cpu-js` engine) of {@link everyMethodSpecs}, computed once for both backends' tests. */
  async function everyMethodExpected(specs: StepSpec[]): Promise<number[][]> {
    if (!everyMethodNodeLosses) {
      everyMethodNodeLosses = [];
      for (const spec of specs) everyMethodNodeLosses.push(await stepLosses(zoo, spec));
    }
    return everyMethodNodeLosses;
  }

  before(async () => {
    const build = buildBrowser();
    assert.equal(build.status, 0, build.stderr);
    await zoo.initEngine('cpu-js');
    nodeLosses = [];
    for (const spec of SPECS) nodeLosses.push(await stepLosses(zoo, spec));
    browser = await launchChromium();
  });

  after(async () => {
    await browser?.close();
    await useCpu(); // the default engine of the files that follow (tests/setup.ts)
  });

  it("trains SimCLR (mlp, tiny_resnet), BYOL, MoCo v2+, SwAV, MAE and I-JEPA (vit_micro) two steps on tfjs's JS cpu backend: Node's losses, no request beyond 127.0.0.1", async () => {
    const { engine, losses, requests } = await pageLosses(browser, 'cpu');
    assert.equal(engine, 'cpu');
    assertLosses(losses, nodeLosses, 1e-6);
    assert.ok(requests.length >= 3, requests.join(' '));
    assert.deepEqual(
      requests.filter((url) => !url.startsWith(`${ORIGIN}/`)),
      [],
    );
  });

  it('trains the same steps on WebGPU (SwiftShader): the losses of Node to float32 round-off', async () => {
    const { engine, losses, gpuBytes, requests } = await pageLosses(browser, 'webgpu');
    assert.equal(engine, 'webgpu');
    assert.ok(gpuBytes > 0, 'the model lives in GPU buffers');
    assertLosses(losses, nodeLosses, 1e-5);
    assert.deepEqual(
      requests.filter((url) => !url.startsWith(`${ORIGIN}/`)),
      [],
    );
  });

  it("every other built-in method takes two steps (SGD, LARS or AdamW) on the mlp backbone (msn, ibot, dinov2: vit_micro; vicregl: tiny_resnet) in the page (JS cpu backend): Node's losses", async () => {
    const specs = everyMethodSpecs();
    const expected = await everyMethodExpected(specs);
    const { engine, losses } = await pageLosses(browser, 'cpu', specs);
    assert.equal(engine, 'cpu');
    assert.equal(losses.length, zoo.BUILT_IN_METHODS.length - 2);
    assertLosses(losses, expected, 1e-6, specs);
  });

  it("the same steps on WebGPU (SwiftShader) of every other built-in method: Node's losses to float32 round-off", async () => {
    const specs = everyMethodSpecs();
    const expected = await everyMethodExpected(specs);
    const { engine, losses, gpuBytes } = await pageLosses(browser, 'webgpu', specs);
    assert.equal(engine, 'webgpu');
    assert.ok(gpuBytes > 0, 'the models live in GPU buffers');
    for (const step of [0, 1]) {
      const worst = Math.max(...specs.map((_, m) => Math.abs(losses[m]![step]! - expected[m]![step]!) / Math.max(1, Math.abs(expected[m]![step]!))));
      console.log(`      step ${step + 1}: the largest relative difference from Node's losses ${worst.toExponential(1)}`);
    }
    // The first step's loss is the forward pass of the same weights; the second follows an
    // update, where AdamW's division by the root of the second moment amplifies round-off.
    assertLosses(
      losses.map((l) => [l[0]!]),
      expected.map((l) => [l[0]!]),
      1e-5,
      specs,
    );
    assertLosses(losses, expected, 1e-4, specs);
  });

  it('augments (crop, colour jitter, grayscale, blur, solarization, flip, normalisation; the eval view) in the page as in Node', async () => {
    const { page, errors } = await openPage(browser);
    try {
      const inPage = await page.evaluate(async (origin) => {
        const lib = (await import(`${origin}/ssl-zoo.js`)) as typeof zoo;
        const { augmentedPixels: run } = (await import(`${origin}/steps.js`)) as { augmentedPixels: typeof augmentedPixels };
        return run(lib, 5);
      }, ORIGIN);
      assert.deepEqual(errors, []);
      const inNode = augmentedPixels(zoo, 5);
      assert.equal(inPage.length, 8 * 12 * 12 * 3 * 3);
      assert.ok(new Set(inNode.map((v) => v.toFixed(3))).size > 100, 'the views are not constant');
      const worst = Math.max(...inNode.map((v, i) => Math.abs(v - inPage[i])));
      assert.ok(worst <= 1e-6, `largest difference ${worst}`);
    } finally {
      await page.close();
    }
  });
});
