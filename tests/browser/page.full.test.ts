/**
 * The training page (examples/browser) in headless Chromium: given a folder of PNGs in two
 * classes, it trains SimCLR on tiny_resnet for 20 steps on WebGPU (SwiftShader, with
 * bundle.ts's flags) in the page, the loss falls, the page makes no request after load, a
 * reload continues at the step reached, its downloaded checkpoint continues in `ssl-train
 * --resume`, the backbone it exports (the downloaded files, loaded with tfjs-layers in Node)
 * gives `ssl-train embed`'s features of that checkpoint, its kNN and linear probes equal the
 * same probes computed here, and a Node `last.ckpt` loads into the page (on the JS cpu backend).
 */
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Page } from 'playwright-core';
import * as zoo from '../../src/browser.js';
import { relativeDiff, runTfjs, TOLERANCE } from '../export/helpers.js';
import { readNpy } from '../helpers/npy.js';
import { runCli } from '../helpers/run.js';
import { loadCheckpoint } from '../../src/trainer/checkpoint.js';
import { ORIGIN } from './bundle.js';
import { click, downloadCheckpoint, downloadExport, folderPixels, openTrainingPage, pageState, waitForStatus, waitForText, pageSuite } from './page-helpers.js';
import { referenceLinearProbe } from './page-probe-reference.js';

/**
 * 32 images of 8 px in two classes, batch 4: 8 steps an epoch, 10 epochs (a step of
 * tiny_resnet on 16 px takes seconds on tfjs's JS backend). With this seed and lr the loss of
 * the last 5 of 20 steps is 0.36 below that of the first 5 (the same run in Node, on the
 * native engine, gives the same losses); at batch 8 the SimCLR loss is too noisy for 20 steps.
 */
const IMAGE_SIZE = 8;
const SETTINGS = { 'image-size': '8', 'batch-size': '4', epochs: '10', seed: '3', lr: '0.4' };

/** The page's linear probe settings (examples/browser/linear-probe.ts's defaults, the run's seed). */
const LINEAR_PROBE = { seed: 3, epochs: 100, batchSize: 64, lr: 0.1, momentum: 0.9, weightDecay: 0 };

/** Where the test's screenshot of the page during training goes (the README shows it). */
const SCREENSHOT = fileURLToPath(new URL('../../../docs/images/browser-page.png', import.meta.url));

/**
 * Leave-one-out kNN top-1 of `features` (`[labels.length, dim]`), computed here to check the
 * page's: the 10 most cosine-similar other images vote for their class with weight exp(s / 0.07).
 */
function knnLeaveOneOut(features: Float32Array, dim: number, labels: Int32Array): number {
  const n = labels.length;
  const unit = Array.from({ length: n }, (_, i) => {
    const row = features.subarray(i * dim, (i + 1) * dim);
    const norm = Math.sqrt(row.reduce((a, v) => a + v * v, 0));
    return Array.from(row, (v) => v / norm);
  });
  let correct = 0;
  for (let i = 0; i < n; i++) {
    const nearest = unit
      .map((row, j) => ({ j, s: row.reduce((a, v, d) => a + v * unit[i]![d]!, 0) }))
      .filter(({ j }) => j !== i)
      .sort((a, b) => b.s - a.s)
      .slice(0, 10);
    const votes = [0, 0];
    for (const { j, s } of nearest) votes[labels[j]!]! += Math.exp(s / 0.07);
    if ((votes[1]! > votes[0]! ? 1 : 0) === labels[i]) correct++;
  }
  return correct / n;
}

/** Pixels of the UMAP canvas in each of the first two class colours (probe.js's #1f77b4, #d62728). */
function umapColours(page: Page): Promise<number[]> {
  return page.evaluate(`(() => {
    const canvas = document.getElementById('umap');
    const data = canvas.getContext('2d').getImageData(0, 0, canvas.width - 130, canvas.height).data;
    const counts = [0, 0];
    for (let p = 0; p < data.length; p += 4) {
      if (data[p] === 0x1f && data[p + 1] === 0x77 && data[p + 2] === 0xb4) counts[0]++;
      if (data[p] === 0xd6 && data[p + 1] === 0x27 && data[p + 2] === 0x28) counts[1]++;
    }
    return counts;
  })()`);
}

/**
 * How long the page may take to reach a pause on a fresh WebGPU device: SwiftShader compiles every
 * pipeline on the CPU before the first step. After a reload that alone took 27 s on AMD EPYC
 * (AVX-512, 2 cores) beside the quickstart test, and over 60 s in the CI run of stop 52 (a slower machine).
 */
const FRESH_DEVICE_MS = 300_000;

describe('the training page in headless Chromium', function () {
  this.timeout(600_000);
  const suite = pageSuite(2, IMAGE_SIZE, 16);

  it("trains SimCLR on tiny_resnet 20 steps from a picked folder on WebGPU: the loss falls, no request after load, its export gives ssl-train embed's features, the probe's kNN, UMAP and linear probe, a reload continues at the step reached", async () => {
    const { page, requests, errors } = await openTrainingPage(suite.browser);
    const loaded = requests.length;
    assert.ok(
      requests.every((url) => url.startsWith(`${ORIGIN}/`)),
      requests.join(' '),
    );
    // WebGPU, not auto: a page without an adapter fails with the engine's message (waitForStatus shows it), never falls back to cpu.
    await page.selectOption('#engine', 'webgpu');
    for (const [id, value] of Object.entries(SETTINGS)) await page.fill(`#${id}`, value);
    await page.selectOption('#method', 'simclr');
    await page.selectOption('#backbone', 'tiny_resnet');
    await page.setInputFiles('#folder', join(suite.dir, 'images'));
    await waitForText(page, 'data-status', /^32 images, 8 x 8 px, 2 classes/);
    await page.fill('#pause-at', '20');
    await click(page, 'start');
    await waitForStatus(page, /^Paused at step 20 \/ 80; saved in this browser\.$/, FRESH_DEVICE_MS);
    const { losses } = await pageState(page);
    assert.equal(losses.length, 20);
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    assert.ok(mean(losses.slice(-5)) < mean(losses.slice(0, 5)), `losses ${losses.map((l) => l.toFixed(3)).join(' ')}`);
    assert.deepEqual(requests.slice(loaded), [], 'no request after load');
    assert.deepEqual(errors, []);
    // It trained on WebGPU, in the page's worker: the engine there, and the model's tensors in GPU buffers.
    assert.deepEqual(await page.evaluate('[sslPage.engine, sslPage.session.thread]'), ['webgpu', 'worker']);
    const gpuBytes = (await page.evaluate('sslPage.session.memory().then((memory) => memory.numBytesInGPU ?? 0)')) as number;
    assert.ok(gpuBytes > 0, `tensors in GPU buffers: ${gpuBytes} bytes`);

    // The checkpoint the page offers continues in Node.
    const checkpoint = await downloadCheckpoint(page, join(suite.dir, 'page.ckpt'));
    const command = ((await page.textContent('#node-command')) ?? '')
      .replace(/^Continue in Node: ssl-train /, '')
      .replace('page.ckpt', checkpoint)
      .replaceAll('DIR', join(suite.dir, 'images'));
    const run = runCli([...command.split(' '), '--backend', 'cpu', '--workers', '0', '--max-steps', '21', '--run-dir', join(suite.dir, 'node-run')]);
    assert.equal(run.status, 0, run.stderr);
    assert.match(run.stderr, /resuming from .*page\.ckpt \(epoch 3, batch 4, step 20\)/);

    // The backbone the page exports (its downloads) gives ssl-train embed's features of the page's checkpoint.
    const exported = join(suite.dir, 'export');
    assert.deepEqual((await downloadExport(page, exported)).sort(), ['group1-shard1of1.bin', 'model.json', 'ssl-zoo.json']);
    // Its batch-norm update counts (ssl-zoo.json) are the checkpoint's, not zeros of a synchronous GPU read.
    const exportedCounts = Object.entries(
      (JSON.parse(readFileSync(join(exported, 'ssl-zoo.json'), 'utf8')) as { tfjs: { buffers: Record<string, number> } }).tfjs.buffers,
    );
    const saved = loadCheckpoint(checkpoint).tensors;
    assert.ok(exportedCounts.length > 0 && exportedCounts.every(([, count]) => count > 0), JSON.stringify(exportedCounts));
    for (const [name, count] of exportedCounts) assert.equal(count, saved[`model/${name}`]?.dataSync()[0], name);
    zoo.tf.dispose(Object.values(saved));
    const pixels = await folderPixels(join(suite.dir, 'images'), IMAGE_SIZE);
    const x = zoo.tf.tensor4d(pixels.values, [pixels.length, IMAGE_SIZE, IMAGE_SIZE, 3]);
    const [pageFeatures] = await runTfjs(exported, x);
    x.dispose();
    const embedded = join(suite.dir, 'embed.npy');
    const folder = ['--dataset', 'folder', '--data-dir', join(suite.dir, 'images'), '--val-dir', join(suite.dir, 'images'), '--split', 'train'];
    const embed = runCli(['embed', '--checkpoint', checkpoint, ...folder, '--out', embedded, '--backend', 'cpu']);
    assert.equal(embed.status, 0, embed.stderr);
    const features = readNpy(embedded);
    assert.equal(features.shape[0], 32);
    const diff = relativeDiff(features.values as Float32Array, pageFeatures!);
    assert.ok(diff <= TOLERANCE, `the page's export differs from ssl-train embed by ${diff} (relative to the largest feature) > ${TOLERANCE}`);

    // The probe at the pause (once the linear probe is shown, the last of it): its features
    // are the exported model's; its leave-one-out kNN top-1 of the 32 labelled images is the
    // one computed here from those features (up to one image flipped by round-off); the UMAP
    // has dots of both class colours.
    const linearShown = await waitForText(page, 'linear-status', /^Linear probe top-1 (\d\.\d{3}) at step 20 on 16 test images \(.* the other 16, /);
    const shown = await waitForText(page, 'probe-status', /^kNN top-1 (\d\.\d{3}) at step 20 \(leave-one-out over 32 labelled images, k = 10/);
    type LinearState = { testAccuracy: number; testLoss: number; trainAccuracy: number; testImages: number; steps: number; settings: object };
    const probed = (await page.evaluate(
      '({ ...sslPage.probe, features: Array.from(sslPage.probe.features), labels: Array.from(sslPage.probe.labels), rows: Array.from(sslPage.probe.rows) })',
    )) as { accuracy: number; images: number; step: number; features: number[]; labels: number[]; rows: number[]; dim: number; linear: LinearState };
    const labels = Int32Array.from({ length: 32 }, (_, i) => (i < 16 ? 0 : 1));
    assert.deepEqual([probed.rows, probed.labels, probed.dim], [Array.from(labels.keys()), Array.from(labels), features.shape[1]]);
    const featureDiff = relativeDiff(Float32Array.from(probed.features), pageFeatures!);
    assert.ok(featureDiff <= TOLERANCE, `the probe's features differ from the exported model's by ${featureDiff} (relative to the largest) > ${TOLERANCE}`);
    assert.equal(Number(/top-1 (\S+)/.exec(shown)![1]), Number(probed.accuracy.toFixed(3)));
    assert.ok(probed.images === 32 && probed.step === 20, JSON.stringify({ images: probed.images, step: probed.step }));
    const expected = knnLeaveOneOut(Float32Array.from(probed.features), probed.dim, labels);
    assert.ok(Math.abs(probed.accuracy - expected) <= 1 / 32 + 1e-9, `the page's kNN top-1 ${probed.accuracy}, from its features here ${expected}`);
    const colours = await umapColours(page);
    assert.ok(colours.filter((count) => count > 0).length >= 2, `UMAP pixels of the class colours: ${colours.join(', ')}`);

    // The linear probe: its split, accuracies and test loss are those of the float64
    // re-implementation (page-probe-reference.ts) on the probe's features.
    const { linear } = probed;
    assert.deepEqual(linear.settings, LINEAR_PROBE);
    assert.equal(Number(/top-1 (\S+)/.exec(linearShown)![1]), Number(linear.testAccuracy.toFixed(3)));
    const reference = referenceLinearProbe(probed.features, probed.dim, probed.labels, 2, LINEAR_PROBE);
    assert.equal(linear.steps, reference.steps);
    assert.ok(
      Math.abs(linear.testAccuracy - reference.testAccuracy) <= 1 / 16 + 1e-9,
      `linear probe top-1 ${linear.testAccuracy}, reference ${reference.testAccuracy}`,
    );
    assert.ok(
      Math.abs(linear.trainAccuracy - reference.trainAccuracy) <= 1 / 16 + 1e-9,
      `training top-1 ${linear.trainAccuracy}, reference ${reference.trainAccuracy}`,
    );
    const lossDiff = Math.abs(linear.testLoss - reference.testLoss) / reference.testLoss;
    assert.ok(lossDiff <= 1e-3, `linear probe test loss ${linear.testLoss}, reference ${reference.testLoss}`);

    // A screenshot of the page while it trains (docs/images/browser-page.png, in the README),
    // then the Pause button: it stops after the step under way, wherever the screenshot left it.
    await page.fill('#pause-at', '60');
    await click(page, 'start');
    await page.waitForFunction("/^Step 2[1-4] \\//.test(document.getElementById('status').textContent)", undefined, { polling: 50 });
    await page.screenshot({ path: SCREENSHOT });
    assert.match((await page.textContent('#status')) ?? '', /^Step [2-5]\d \/ 80/, 'still training once the screenshot was taken');
    await click(page, 'pause');
    const paused = Number(/^Paused at step (\d+) \/ 80/.exec(await waitForStatus(page, /^Paused at step \d+ \/ 80/))![1]);
    assert.ok(paused >= 21 && paused < 60, `paused at step ${paused}`);

    // A reload offers the saved run and continues at the step reached.
    await page.reload({ waitUntil: 'load' });
    await page.waitForSelector('#resume-offer:not([hidden])');
    assert.match((await page.textContent('#resume-text')) ?? '', new RegExp(`stopped at step ${paused}\\b`));
    await page.fill('#pause-at', String(paused + 2));
    await click(page, 'resume-continue');
    await waitForStatus(page, new RegExp(`^Paused at step ${paused + 2} / 80`), FRESH_DEVICE_MS); // the reload's new device compiles again
    assert.equal(await page.evaluate('sslPage.engine'), 'webgpu', 'the reloaded run continued on its engine');
    const after = await pageState(page);
    assert.equal(after.losses.length, paused + 2, 'the history is kept, two steps added');
    assert.deepEqual(errors, []);
    await page.context().close();
  });

  it("loads ssl-train's last.ckpt and continues it in the page", async () => {
    const runDir = join(suite.dir, 'node-first');
    const flags = [
      '--method',
      'simclr',
      '--backbone',
      'tiny_resnet',
      '--dataset',
      'folder',
      '--data-dir',
      join(suite.dir, 'images'),
      '--val-dir',
      join(suite.dir, 'images'),
      '--val-every',
      '0',
    ];
    const sizes = ['--image-size', '8', '--channels', '3', '--batch-size', '4', '--epochs', '10', '--seed', '3'];
    const run = runCli([...flags, ...sizes, '--backend', 'cpu', '--workers', '0', '--max-steps', '6', '--run-dir', runDir]);
    assert.equal(run.status, 0, run.stderr);
    const { page, requests, errors } = await openTrainingPage(suite.browser);
    await page.selectOption('#engine', 'cpu');
    await page.fill('#image-size', '8');
    await page.setInputFiles('#folder', join(suite.dir, 'images'));
    await waitForText(page, 'data-status', /^32 images/);
    const loaded = requests.length;
    await page.setInputFiles('#load-checkpoint', join(runDir, 'checkpoints', 'last.ckpt'));
    await waitForStatus(page, /^Loaded last\.ckpt: simclr on tiny_resnet, step 6 \/ 80\.$/);
    await page.fill('#pause-at', '7');
    await click(page, 'start');
    await waitForStatus(page, /^Paused at step 7 \/ 80/);
    assert.equal((await pageState(page)).step, 7);
    assert.deepEqual(requests.slice(loaded), []);
    assert.deepEqual(errors, []);
    await page.context().close();
  });
});
