/**
 * Writes an export directory from a backbone in memory: the model files of one format and
 * `ssl-zoo.json`, all-or-nothing (a temporary directory beside the target, then a rename).
 */
import { existsSync, mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { MlpBackbone, type Backbone } from '../backbones/index.js';
import { atPath } from '../core/errors.js';
import type { NormKind } from '../core/layers.js';
import type { Layer } from '../core/module.js';
import { buildExportGraph } from './graph.js';
import { toOnnx } from './onnx.js';
import { EXPORT_FORMAT_VERSION, EXPORT_METADATA_FILE, ONNX_MODEL_FILE, TFJS_MODEL_FILE, type ExportFormat, type ExportedSpec } from './spec.js';
import { TFJS_WEIGHTS_FILE, toTfjs } from './tfjs.js';

/** A backbone to export, with what the spec records about it. */
export interface BackboneExport {
  /** In eval mode: the export computes its eval-mode forward. */
  backbone: Backbone;
  /** Exported as the second output `projection` when given. */
  projector?: Layer;
  /** Registered name of the backbone. */
  name: string;
  inChannels: number;
  imageSize: number;
  cifarStem: boolean;
  norm: NormKind;
  /** Per-channel normalisation of [0, 1] pixels, `[C]` or `[1]` each. */
  mean: readonly number[];
  std: readonly number[];
  sslZooVersion: string;
  source?: ExportedSpec['source'];
}

/** Writes `files` (name -> content) into a fresh temporary directory beside `out`, then renames it to `out` (replacing it). */
function writeDirAtomic(out: string, files: Array<[string, Uint8Array | string]>): void {
  const parent = dirname(resolve(out));
  mkdirSync(parent, { recursive: true });
  const tag = `${process.pid}-${Date.now()}`;
  const temp = join(parent, `.${basename(out)}.tmp-${tag}`);
  const old = join(parent, `.${basename(out)}.old-${tag}`);
  mkdirSync(temp);
  try {
    // Named as the file the user asked for: the temporary directory is an internal detail.
    for (const [name, content] of files) atPath(join(out, name), 'writing', () => writeFileSync(join(temp, name), content));
    if (existsSync(out)) renameSync(out, old);
    renameSync(temp, out);
  } catch (e) {
    rmSync(temp, { recursive: true, force: true });
    if (existsSync(old) && !existsSync(out)) renameSync(old, out);
    throw e;
  }
  rmSync(old, { recursive: true, force: true });
}

/**
 * Exports `e` as `format` into the directory `out` (replaced if it exists; the caller
 * checks whether it may be): `tfjs` writes `model.json` and `group1-shard1of1.bin`, `onnx`
 * writes `model.onnx`; both write `ssl-zoo.json` ({@link ExportedSpec}; for tfjs also the
 * tfjs weight name of every backbone/projector tensor and the batch norms' update counts,
 * which `readExportedBackbone` uses). Returns the spec and the file names.
 */
export function writeExport(e: BackboneExport, format: ExportFormat, out: string): { spec: ExportedSpec; files: string[] } {
  const inputShape: [number, number, number] = [e.imageSize, e.imageSize, e.inChannels];
  const graph = buildExportGraph({ backbone: e.backbone, projector: e.projector, inputShape, mean: e.mean, std: e.std });
  const projection = graph.outputs[1] && graph.nodes.find((n) => n.name === graph.outputs[1]!.node);
  const spec: ExportedSpec = {
    format: EXPORT_FORMAT_VERSION,
    backbone: e.name,
    inChannels: e.inChannels,
    imageSize: e.imageSize,
    cifarStem: e.cifarStem,
    norm: e.norm,
    ...(e.backbone instanceof MlpBackbone ? { mlpHidden: [...e.backbone.hidden] } : {}),
    normalization: { mean: perChannel(e.mean, e.inChannels), std: perChannel(e.std, e.inChannels) },
    featureDim: e.backbone.featureDim,
    ...(projection ? { projectionDim: projection.shape[0] } : {}),
    input: { name: graph.input.name, layout: format === 'onnx' ? 'NCHW' : 'NHWC', range: [0, 1] },
    outputs: graph.outputs.map((o) => o.name),
    sslZooVersion: e.sslZooVersion,
    ...(e.source ? { source: e.source } : {}),
  };
  const files: Array<[string, Uint8Array | string]> = [];
  if (format === 'tfjs') {
    const model = toTfjs(graph, { sslZoo: spec }, `ssl-zoo ${e.sslZooVersion}`);
    const named = [...e.backbone.namedBuffers('backbone'), ...(e.projector?.namedBuffers('projector') ?? [])];
    const counts = named.filter(([name]) => name.endsWith('.numBatchesTracked'));
    const buffers = Object.fromEntries(counts.map(([name, v]) => [name, v.dataSync()[0]!]));
    files.push([TFJS_MODEL_FILE, JSON.stringify(model.modelJson)], [TFJS_WEIGHTS_FILE, model.weightData]);
    files.push([EXPORT_METADATA_FILE, `${JSON.stringify({ ...spec, tfjs: { weights: model.weightNames, buffers } }, null, 2)}\n`]);
  } else {
    files.push([ONNX_MODEL_FILE, toOnnx(graph, { sslZoo: spec }, e.sslZooVersion)], [EXPORT_METADATA_FILE, `${JSON.stringify(spec, null, 2)}\n`]);
  }
  writeDirAtomic(out, files);
  return { spec, files: files.map(([name]) => name) };
}

function perChannel(v: readonly number[], channels: number): number[] {
  return Array.from({ length: channels }, (_, i) => (v.length === 1 ? v[0]! : v[i]!));
}
