/** Helpers of the browser tests: building the bundle, and a page served from 127.0.0.1 by Playwright's routing. */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';

/** The build script and the bundle it writes. */
export const BUILD_SCRIPT = fileURLToPath(new URL('../../../scripts/build-browser.mjs', import.meta.url));
export const BUNDLE = fileURLToPath(new URL('../../browser/ssl-zoo.js', import.meta.url));
/** The compiled step fixture and the test ViT it registers, served to the page as they are (steps.js imports ../helpers/vit-micro.js). */
const STEPS = fileURLToPath(new URL('./steps.js', import.meta.url));
const VIT_MICRO_MODULE = fileURLToPath(new URL('../helpers/vit-micro.js', import.meta.url));

/** Debian's chromium. */
export const CHROMIUM = '/usr/bin/chromium';
/**
 * WebGPU on SwiftShader in headless Chromium (a secure context is needed too: 127.0.0.1 is
 * one). On this machine `--enable-unsafe-webgpu` alone, or with `--use-angle=swiftshader`,
 * gives the same SwiftShader adapter; see docs/browser.md.
 */
export const WEBGPU_FLAGS = ['--enable-unsafe-webgpu', '--enable-features=Vulkan', '--use-vulkan=swiftshader', '--use-webgpu-adapter=swiftshader'];
/** The origin the page is served from (answered by routing; nothing listens there). */
export const ORIGIN = 'http://127.0.0.1:9';

/** Runs `node scripts/build-browser.mjs args...` to completion. */
export function buildBrowser(args: string[] = []): { status: number | null; stdout: string; stderr: string } {
  const result = spawnSync(process.execPath, [BUILD_SCRIPT, ...args], { encoding: 'utf8', timeout: 120_000 });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

/** Headless chromium with the WebGPU flags. */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: WEBGPU_FLAGS });
}

/** A page on {@link ORIGIN} serving `/ssl-zoo.js` (the bundle), `/steps.js` and the `/helpers/vit-micro.js` it imports; every request it makes lands in `requests`, any other than the origin's is aborted, and page errors in `errors`. */
export async function openPage(browser: Browser): Promise<{ page: Page; requests: string[]; errors: string[] }> {
  const page = await browser.newPage();
  const requests: string[] = [];
  const errors: string[] = [];
  page.on('request', (request) => requests.push(request.url()));
  page.on('pageerror', (error) => errors.push(error.message));
  const files: Record<string, [string, string]> = {
    '/': ['<!doctype html><title>ssl-zoo</title>', 'text/html'],
    '/ssl-zoo.js': [readFileSync(BUNDLE, 'utf8'), 'text/javascript'],
    '/ssl-zoo.js.map': [readFileSync(`${BUNDLE}.map`, 'utf8'), 'application/json'],
    '/steps.js': [readFileSync(STEPS, 'utf8'), 'text/javascript'],
    '/helpers/vit-micro.js': [readFileSync(VIT_MICRO_MODULE, 'utf8'), 'text/javascript'],
  };
  await page.route('**/*', (route) => {
    const url = new URL(route.request().url());
    const file = url.origin === ORIGIN ? files[url.pathname] : undefined;
    return file ? route.fulfill({ body: file[0], contentType: file[1] }) : route.abort();
  });
  await page.goto(`${ORIGIN}/`);
  return { page, requests, errors };
}
