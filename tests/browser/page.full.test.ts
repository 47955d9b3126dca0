/**
 * The training page (examples/browser) in headless Chromium: given a folder of PNGs in two
 * classes, it trains SimCLR on tiny_resnet for 20 steps on tfjs's JS cpu backend in the page
 * (WebGPU on SwiftShader is too slow for this file's time budget; steps.full.test.ts checks the
 * WebGPU steps), the loss falls, the page makes no request after load, a reload continues at
 * the step reached, its downloaded checkpoint continues in `ssl-train --resume`, and a Node
 * `last.ckpt` loads into the page.
 */
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import * as zoo from '../../src/browser.js';
import { pageFile, pageFolders } from '../../src/cli/serve.js';
import { writePngFolder } from '../helpers/image-folder.js';
import { runCli, tempDir } from '../helpers/run.js';
import { buildBrowser, launchChromium, ORIGIN } from './bundle.js';

/**
 * 32 images of 8 px in two classes, batch 4: 8 steps an epoch, 10 epochs (a step of
 * tiny_resnet on 16 px takes seconds on tfjs's JS backend). With this seed and lr the loss of
 * the last 5 of 20 steps is 0.36 below that of the first 5 (the same run in Node, on the
 * native engine, gives the same losses); at batch 8 the SimCLR loss is too noisy for 20 steps.
 */
const IMAGE_SIZE = 8;
const SETTINGS = { 'image-size': '8', 'batch-size': '4', epochs: '10', seed: '3', lr: '0.4' };

/** The page as `ssl-train serve` serves it (the same file lookup), from {@link ORIGIN} through Playwright's routing; every request is recorded, any other origin's is aborted. */
async function openTrainingPage(browser: Browser): Promise<{ page: Page; requests: string[]; errors: string[] }> {
  const context = await browser.newContext({ acceptDownloads: true });
  const page = await context.newPage();
  const requests: string[] = [];
  const errors: string[] = [];
  page.on('request', (request) => requests.push(request.url()));
  page.on('pageerror', (error) => errors.push(error.message));
  const folders = pageFolders();
  await page.route('**/*', (route) => {
    const url = new URL(route.request().url());
    const path = url.origin === ORIGIN ? pageFile(url.pathname, folders) : undefined;
    const type = path?.endsWith('.html') ? 'text/html' : path?.endsWith('.css') ? 'text/css' : 'text/javascript';
    return path ? route.fulfill({ body: readFileSync(path), contentType: type }) : route.abort();
  });
  await page.goto(`${ORIGIN}/`, { waitUntil: 'load' });
  await page.waitForFunction('"sslPage" in window');
  return { page, requests, errors };
}

/** The page's state (`window.sslPage`): the loss history, the session's step, an error. */
function pageState(page: Page): Promise<{ losses: number[]; step: number | undefined; error: string | undefined }> {
  return page.evaluate('({ losses: sslPage.history.map((h) => h.loss), step: sslPage.session?.step, error: sslPage.error })');
}

/** Waits until the text of element `id` matches `pattern` (or the page shows an error), then asserts the match. */
async function waitForText(page: Page, id: string, pattern: RegExp, timeout = 60_000): Promise<string> {
  const text = `document.getElementById(${JSON.stringify(id)}).textContent`;
  await page.waitForFunction(`${pattern.toString()}.test(${text}) || /^Error/.test(document.getElementById('status').textContent)`, undefined, { timeout });
  const shown = (await page.textContent(`#${id}`)) ?? '';
  assert.match(shown, pattern);
  return shown;
}

/**
 * Clicks button `id` from inside the page: training keeps the page's thread busy between its
 * short yields, where a Playwright click waits for the page to acknowledge the input.
 */
async function click(page: Page, id: string): Promise<void> {
  await page.evaluate(`document.getElementById(${JSON.stringify(id)}).click()`);
}

/** {@link waitForText} on the training status line. */
function waitForStatus(page: Page, pattern: RegExp, timeout = 60_000): Promise<string> {
  return waitForText(page, 'status', pattern, timeout);
}

describe('the training page in headless Chromium', function () {
  this.timeout(600_000);
  let browser: Browser;
  let dir: string;

  before(async () => {
    const build = buildBrowser();
    assert.equal(build.status, 0, build.stderr);
    dir = tempDir();
    const ds = zoo.syntheticDataset({ split: 'train', seed: 2, size: 512, imageSize: IMAGE_SIZE, channels: 3 });
    await writePngFolder(ds, join(dir, 'images'), 16, 2);
    browser = await launchChromium();
  });

  after(async () => {
    await browser?.close();
  });

  it('trains SimCLR on tiny_resnet 20 steps from a picked folder (JS cpu backend): the loss falls, no request after load, a reload continues at step 20', async () => {
    const { page, requests, errors } = await openTrainingPage(browser);
    const loaded = requests.length;
    assert.ok(
      requests.every((url) => url.startsWith(`${ORIGIN}/`)),
      requests.join(' '),
    );
    await page.selectOption('#engine', 'cpu');
    for (const [id, value] of Object.entries(SETTINGS)) await page.fill(`#${id}`, value);
    await page.selectOption('#method', 'simclr');
    await page.selectOption('#backbone', 'tiny_resnet');
    await page.setInputFiles('#folder', join(dir, 'images'));
    await waitForText(page, 'data-status', /^32 images, 8 x 8 px, 2 classes/);
    await page.fill('#pause-at', '20');
    await click(page, 'start');
    await waitForStatus(page, /^Paused at step 20 \/ 80; saved in this browser\.$/, 300_000);
    const { losses } = await pageState(page);
    assert.equal(losses.length, 20);
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    assert.ok(mean(losses.slice(-5)) < mean(losses.slice(0, 5)), `losses ${losses.map((l) => l.toFixed(3)).join(' ')}`);
    assert.deepEqual(requests.slice(loaded), [], 'no request after load');
    assert.deepEqual(errors, []);

    // The checkpoint the page offers continues in Node.
    const [download] = await Promise.all([page.waitForEvent('download'), page.click('#download-checkpoint')]);
    const checkpoint = join(dir, 'page.ckpt');
    await download.saveAs(checkpoint);
    const command = ((await page.textContent('#node-command')) ?? '')
      .replace(/^Continue in Node: ssl-train /, '')
      .replace('page.ckpt', checkpoint)
      .replaceAll('DIR', join(dir, 'images'));
    const run = runCli([...command.split(' '), '--backend', 'cpu', '--workers', '0', '--max-steps', '21', '--run-dir', join(dir, 'node-run')]);
    assert.equal(run.status, 0, run.stderr);
    assert.match(run.stderr, /resuming from .*page\.ckpt \(epoch 3, batch 4, step 20\)/);

    // A reload offers the saved run and continues at step 20.
    await page.reload({ waitUntil: 'load' });
    await page.waitForSelector('#resume-offer:not([hidden])');
    assert.match((await page.textContent('#resume-text')) ?? '', /stopped at step 20/);
    await page.fill('#pause-at', '22');
    await click(page, 'resume-continue');
    await waitForStatus(page, /^Paused at step 22 \/ 80/);
    const after = await pageState(page);
    assert.equal(after.losses.length, 22, 'the history is kept, two steps added');
    assert.deepEqual(errors, []);
    await page.context().close();
  });

  it("loads ssl-train's last.ckpt and continues it in the page", async () => {
    const runDir = join(dir, 'node-first');
    const flags = [
      '--method',
      'simclr',
      '--backbone',
      'tiny_resnet',
      '--dataset',
      'folder',
      '--data-dir',
      join(dir, 'images'),
      '--val-dir',
      join(dir, 'images'),
      '--val-every',
      '0',
    ];
    const sizes = ['--image-size', '8', '--channels', '3', '--batch-size', '4', '--epochs', '10', '--seed', '3'];
    const run = runCli([...flags, ...sizes, '--backend', 'cpu', '--workers', '0', '--max-steps', '6', '--run-dir', runDir]);
    assert.equal(run.status, 0, run.stderr);
    const { page, requests, errors } = await openTrainingPage(browser);
    await page.selectOption('#engine', 'cpu');
    await page.fill('#image-size', '8');
    await page.setInputFiles('#folder', join(dir, 'images'));
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
