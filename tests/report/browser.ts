import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';
import { PNG } from 'pngjs';

/** Debian's Chromium (`apt-get install -y chromium`; scripts/setup.sh installs it). */
export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

/** Headless Chromium in a fresh profile, without network features; throws a clear error when it is not installed. */
export async function launchChromium(): Promise<{ context: BrowserContext; close: () => Promise<void> }> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`Chromium is not installed at ${CHROMIUM}: install it with \`apt-get install -y chromium\` (scripts/setup.sh does), or set CHROMIUM_PATH`);
  }
  const profile = mkdtempSync(join(tmpdir(), 'ssl-zoo-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
    viewport: { width: 1400, height: 900 },
    timeout: 60_000,
  });
  return {
    context,
    close: async () => {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** Pixel statistics of a PNG: how much of it is not (near-)white, and which exact colours it has. */
export interface PixelStats {
  width: number;
  height: number;
  /** Fraction of pixels that are not near-white. */
  inked: number;
  /** `#rrggbb` -> pixel count. */
  colors: Map<string, number>;
}

/** Decodes a PNG (file path or buffer) into {@link PixelStats}. */
export function pixelStats(png: string | Buffer): PixelStats {
  const image = PNG.sync.read(typeof png === 'string' ? readFileSync(png) : png);
  const colors = new Map<string, number>();
  let inked = 0;
  const { data, width, height } = image;
  for (let i = 0; i < width * height; i++) {
    const [r, g, b] = [data[4 * i], data[4 * i + 1], data[4 * i + 2]];
    if (r < 235 || g < 235 || b < 235) inked++;
    const hex = `#${((1 << 24) | (r << 16) | (g << 8) | b).toString(16).slice(1)}`;
    colors.set(hex, (colors.get(hex) ?? 0) + 1);
  }
  return { width, height, inked: inked / (width * height), colors };
}

/** Pixels within `tolerance` (per channel) of `hex`. */
export function countNear(stats: PixelStats, hex: string, tolerance = 6): number {
  const target = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
  let n = 0;
  for (const [color, count] of stats.colors) {
    const c = [1, 3, 5].map((i) => parseInt(color.slice(i, i + 2), 16));
    if (c.every((v, k) => Math.abs(v - target[k]) <= tolerance)) n += count;
  }
  return n;
}
