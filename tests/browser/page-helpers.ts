/**
 * Helpers of the training page's tests (page*.full.test.ts): the page served as `ssl-train
 * serve` serves it through Playwright's routing, its state, waits on its text, clicks from
 * inside the page, and downloads captured with Playwright's download events.
 */
import { strict as assert } from 'node:assert';
import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import sharp from 'sharp';
import * as zoo from '../../src/browser.js';
import { pageFile, pageFolders } from '../../src/cli/serve.js';
import { writePngFolder } from '../helpers/image-folder.js';
import { tempDir } from '../helpers/run.js';
import { buildBrowser, launchChromium, ORIGIN } from './bundle.js';

/** What a page suite's tests use; set by its `before` hook. */
export interface PageSuite {
  browser: Browser;
  /** A temporary folder; the images are in `<dir>/images`, one sub-folder per class. */
  dir: string;
}

/**
 * Registers a page suite's hooks (call it inside `describe`): before its tests the browser
 * bundle is built, `perClass` PNGs of each of two classes (`imageSize` px, the synthetic
 * dataset of `seed`) are written to `<dir>/images` and headless Chromium is launched; after
 * them Chromium is closed.
 */
export function pageSuite(seed: number, imageSize: number, perClass: number): PageSuite {
  const suite = {} as PageSuite;
  before(async () => {
    const build = buildBrowser();
    assert.equal(build.status, 0, build.stderr);
    suite.dir = tempDir();
    const ds = zoo.syntheticDataset({ split: 'train', seed, size: 512, imageSize, channels: 3 });
    await writePngFolder(ds, join(suite.dir, 'images'), perClass, 2);
    suite.browser = await launchChromium();
  });
  after(async () => {
    await suite.browser?.close();
  });
  return suite;
}

/** Content types of the page's files by extension. */
const TYPES: Record<string, string> = { html: 'text/html', css: 'text/css', js: 'text/javascript', map: 'application/json' };

/** The page as `ssl-train serve` serves it (the same file lookup), from {@link ORIGIN} through Playwright's routing; every request is recorded, any other origin's is aborted. */
export async function openTrainingPage(browser: Browser): Promise<{ page: Page; requests: string[]; errors: string[] }> {
  const context = await browser.newContext({ acceptDownloads: true, viewport: { width: 1000, height: 1700 } });
  const page = await context.newPage();
  const requests: string[] = [];
  const errors: string[] = [];
  page.on('request', (request) => requests.push(request.url()));
  page.on('pageerror', (error) => errors.push(error.message));
  const folders = pageFolders();
  await page.route('**/*', (route) => {
    const url = new URL(route.request().url());
    const path = url.origin === ORIGIN ? pageFile(url.pathname, folders) : undefined;
    const type = TYPES[path?.split('.').pop() ?? ''] ?? 'application/octet-stream';
    return path ? route.fulfill({ body: readFileSync(path), contentType: type }) : route.abort();
  });
  await page.goto(`${ORIGIN}/`, { waitUntil: 'load' });
  await page.waitForFunction('"sslPage" in window');
  return { page, requests, errors };
}

/** The page's state (`window.sslPage`): the loss history, the session's step, an error. */
export function pageState(page: Page): Promise<{ losses: number[]; step: number | undefined; error: string | undefined }> {
  return page.evaluate('({ losses: sslPage.history.map((h) => h.loss), step: sslPage.session?.step, error: sslPage.error })');
}

/** Waits until the text of element `id` matches `pattern` (or the page shows an error), then asserts the match. */
export async function waitForText(page: Page, id: string, pattern: RegExp, timeout = 60_000): Promise<string> {
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
export async function click(page: Page, id: string): Promise<void> {
  await page.evaluate(`document.getElementById(${JSON.stringify(id)}).click()`);
}

/** {@link waitForText} on the training status line. */
export function waitForStatus(page: Page, pattern: RegExp, timeout = 60_000): Promise<string> {
  return waitForText(page, 'status', pattern, timeout);
}

/** Clicks "Download checkpoint" and saves the file the page offers (Playwright's download event) as `path`. */
export async function downloadCheckpoint(page: Page, path: string): Promise<string> {
  const [download] = await Promise.all([page.waitForEvent('download'), page.click('#download-checkpoint')]);
  await download.saveAs(path);
  return path;
}

/**
 * Clicks "Export backbone (tfjs)", then each export link the page offers, and saves every
 * download under its suggested name in `dir`; returns the names.
 */
export async function downloadExport(page: Page, dir: string): Promise<string[]> {
  mkdirSync(dir, { recursive: true });
  await page.click('#export');
  await waitForStatus(page, /^Exported the backbone at step/); // the export is a request to the worker
  const links = page.locator('#downloads a[data-export]');
  const names: string[] = [];
  for (let i = 0; i < (await links.count()); i++) {
    const [download] = await Promise.all([page.waitForEvent('download'), links.nth(i).click()]);
    await download.saveAs(join(dir, download.suggestedFilename()));
    names.push(download.suggestedFilename());
  }
  return names;
}

/** A folder of RGB PNGs in class sub-folders as `ssl-train --dataset folder` orders them: `[N, S, S, 3]` values in [0, 1]. */
export async function folderPixels(dir: string, size: number): Promise<{ values: Float32Array; length: number }> {
  const files = readdirSync(dir)
    .sort()
    .flatMap((c) => readdirSync(join(dir, c)).map((name) => `${c}/${name}`))
    .sort();
  const values = new Float32Array(files.length * size * size * 3);
  for (const [i, file] of files.entries()) {
    const raw = await sharp(join(dir, file)).removeAlpha().raw().toBuffer();
    values.set(
      Float32Array.from(raw, (v) => v / 255),
      i * size * size * 3,
    );
  }
  return { values, length: files.length };
}
