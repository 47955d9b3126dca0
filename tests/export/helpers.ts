import { strict as assert } from 'node:assert';
import { createReadStream, existsSync, statSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { extname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as ort from 'onnxruntime-node';
import * as tfl from '@tensorflow/tfjs-layers';
import { createBackbone, type Backbone } from '../../src/backbones/index.js';
import { BatchNorm, GroupNorm, LayerNorm, type NormKind } from '../../src/core/layers.js';
import { Rng } from '../../src/core/random.js';
import { tf } from '../../src/core/tf.js';
import { writeExport } from '../../src/export/write.js';
import { EXPORT_FORMATS, type ExportFormat } from '../../src/export/spec.js';
import type { Layer } from '../../src/core/module.js';

/** Exported features must equal ssl-zoo's to this, relative to the largest feature magnitude. */
export const TOLERANCE = 1e-4;

/** One backbone configuration to export. */
export interface Case {
  name: string;
  inChannels: number;
  imageSize: number;
  cifarStem?: boolean;
  norm?: NormKind;
}

export const label = (c: Case): string => `${c.name}${c.cifarStem ? ' (CIFAR stem)' : ''}, ${c.inChannels} channel(s), ${c.norm ?? 'batch'} norm`;

/** Per-channel normalisation used by the tests (non-trivial, different per channel). */
export function stats(channels: number): { mean: number[]; std: number[] } {
  return { mean: [0.2, 0.5, 0.45].slice(0, channels), std: [0.3, 0.25, 0.2].slice(0, channels) };
}

/**
 * Gives every normalisation layer under `root` non-trivial affine parameters and (batch norm)
 * running statistics, so an export that ignored or mixed them up could not pass.
 */
export function randomizeNorms(root: Layer, seed: number): void {
  const rng = new Rng(seed);
  const set = (v: tf.Variable | undefined, lo: number, hi: number): void => {
    if (v) v.assign(tf.tensor(rng.uniformArray(v.size, lo, hi), v.shape));
  };
  for (const [, m] of root.namedModules()) {
    if (m instanceof BatchNorm || m instanceof GroupNorm || m instanceof LayerNorm) {
      set(m.weight, 0.5, 1.5);
      set(m.bias, -0.3, 0.3);
    }
    if (m instanceof BatchNorm) {
      set(m.runningMean, -0.3, 0.3);
      set(m.runningVar, 0.5, 2);
      m.numBatchesTracked.assign(tf.scalar(7, 'int32'));
    }
  }
}

/** A backbone of `c` with random weights and norm statistics, in eval mode. */
export function makeBackbone(c: Case, seed = 1): Backbone {
  const backbone = createBackbone(c.name, { ...c, rng: new Rng(seed), mlpHidden: c.name === 'mlp' ? [64, 32] : undefined });
  randomizeNorms(backbone, seed + 100);
  return backbone.eval();
}

/** `[B, S, S, C]` random pixels in [0, 1]. */
export function images(c: Case, batch = 3, seed = 5): tf.Tensor4D {
  return tf.tensor4d(new Rng(seed).uniformArray(batch * c.imageSize * c.imageSize * c.inChannels), [batch, c.imageSize, c.imageSize, c.inChannels]);
}

/** ssl-zoo's eval-mode features of `x` (normalised as the eval transform does). */
export function reference(backbone: Layer, x: tf.Tensor4D, channels: number, projector?: Layer): Float32Array[] {
  const { mean, std } = stats(channels);
  return tf.tidy(() => {
    const normalized = tf.div(tf.sub(x, tf.tensor1d(mean)), tf.tensor1d(std));
    const features = backbone.forward(normalized);
    const out = [features.dataSync() as Float32Array];
    if (projector) out.push(projector.forward(features).dataSync() as Float32Array);
    return out;
  });
}

/** Exports `backbone` of case `c` as `format` into `out`. */
export function exportCase(c: Case, backbone: Backbone, format: ExportFormat, out: string, projector?: Layer): void {
  const { mean, std } = stats(c.inChannels);
  writeExport(
    {
      backbone,
      projector,
      name: c.name,
      inChannels: c.inChannels,
      imageSize: c.imageSize,
      cifarStem: c.cifarStem ?? false,
      norm: c.norm ?? 'batch',
      mean,
      std,
      sslZooVersion: 'test',
    },
    format,
    out,
  );
}

/** `max |a - b| / max |a|`: the difference relative to the largest reference magnitude. */
export function relativeDiff(a: Float32Array, b: Float32Array): number {
  if (a.length !== b.length) throw new Error(`length ${a.length} vs ${b.length}`);
  let diff = 0;
  let scale = 0;
  for (let i = 0; i < a.length; i++) {
    diff = Math.max(diff, Math.abs(a[i]! - b[i]!));
    scale = Math.max(scale, Math.abs(a[i]!));
  }
  return diff / scale;
}

/** NHWC -> NCHW copy of `[B, S, S, C]`. */
export function toNchw(x: tf.Tensor4D): Float32Array {
  return tf.tidy(() => tf.transpose(x, [0, 3, 1, 2]).dataSync() as Float32Array);
}

/** Runs the ONNX model in `dir` with onnxruntime-node; returns every output's values in order. */
export async function runOnnx(dir: string, x: tf.Tensor4D): Promise<Float32Array[]> {
  const session = await ort.InferenceSession.create(join(dir, 'model.onnx'));
  try {
    const [b, s, , c] = x.shape;
    const result = await session.run({ images: new ort.Tensor('float32', toNchw(x), [b, c, s, s]) });
    return session.outputNames.map((name) => result[name]!.data as Float32Array);
  } finally {
    await session.release();
  }
}

const packageRoot = fileURLToPath(new URL('../../../', import.meta.url));

/** The tfjs browser bundles a page needs, in load order (core, CPU backend, layers). */
export const TFJS_BUNDLES = ['tfjs-core/dist/tf-core.min.js', 'tfjs-backend-cpu/dist/tf-backend-cpu.min.js', 'tfjs-layers/dist/tf-layers.min.js'];

const TYPES: Record<string, string> = { '.json': 'application/json', '.js': 'text/javascript', '.html': 'text/html', '.bin': 'application/octet-stream' };

/**
 * An http server on 127.0.0.1: `/model/...` serves `modelDir`, `/tfjs/...` the tfjs
 * bundles from node_modules/@tensorflow, `/` a blank page.
 */
export async function serve(modelDir: string): Promise<{ url: string; close: () => Promise<void> }> {
  const roots: Record<string, string> = { model: modelDir, tfjs: join(packageRoot, 'node_modules', '@tensorflow') };
  const server: Server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname);
    const [, top, ...rest] = path.split('/');
    if (path === '/') {
      res.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><title>export test</title>');
      return;
    }
    const root = roots[top ?? ''];
    const file = root && normalize(join(root, ...rest));
    if (!root || !file || !file.startsWith(root) || !existsSync(file) || !statSync(file).isFile()) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'content-type': TYPES[extname(file)] ?? 'application/octet-stream' });
    createReadStream(file).pipe(res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections(); // a browser keeps idle keep-alive connections open
      }),
  };
}

/** Loads the tfjs model in `dir` over http with `tf.loadLayersModel` in this process and predicts `x`. */
export async function runTfjs(dir: string, x: tf.Tensor4D): Promise<Float32Array[]> {
  const server = await serve(dir);
  try {
    const model = await tfl.loadLayersModel(`${server.url}/model/model.json`);
    try {
      const out = model.predict(x) as tf.Tensor | tf.Tensor[];
      const outputs = Array.isArray(out) ? out : [out];
      const values = outputs.map((t) => t.dataSync() as Float32Array);
      tf.dispose(outputs);
      return values;
    } finally {
      model.dispose();
    }
  } finally {
    await server.close();
  }
}

/**
 * Exports `c`'s backbone (seeded with `seed`) in every format under `root` and asserts that each
 * export's features equal ssl-zoo's eval-mode ones within {@link TOLERANCE}; returns the largest
 * difference per format, as lines to print.
 */
export async function checkExportCase(c: Case, seed: number, root: string): Promise<string[]> {
  const backbone = makeBackbone(c, seed);
  const x = images(c);
  const measured: string[] = [];
  try {
    const [expected] = reference(backbone, x, c.inChannels);
    for (const format of EXPORT_FORMATS) {
      const dir = join(root, `case-${seed}-${format}`);
      exportCase(c, backbone, format, dir);
      const [actual] = format === 'tfjs' ? await runTfjs(dir, x) : await runOnnx(dir, x);
      const diff = relativeDiff(expected!, actual!);
      measured.push(`${label(c)} ${format}: max relative difference ${diff.toExponential(2)}`);
      assert.ok(diff <= TOLERANCE, `${format}: features differ by ${diff} (relative to the largest feature) > ${TOLERANCE}`);
    }
  } finally {
    backbone.dispose();
    x.dispose();
  }
  return measured;
}
