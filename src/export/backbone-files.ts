/**
 * The files of a backbone export in memory, free of Node built-ins: the export graph, its
 * {@link ExportedSpec}, and the TensorFlow.js files (`model.json`, the weight shard,
 * `ssl-zoo.json`). `ssl-train export` writes them to a directory (`write.ts`); the browser
 * page offers them as downloads.
 */
import { MlpBackbone, type Backbone } from '../backbones/index.js';
import type { NormKind } from '../core/layers.js';
import type { Layer } from '../core/module.js';
import { buildExportGraph, type ExportGraph } from './graph.js';
import { EXPORT_FORMAT_VERSION, EXPORT_METADATA_FILE, TFJS_MODEL_FILE, type ExportFormat, type ExportedSpec } from './spec.js';
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

/** The export graph of `e` and the spec of its export in `format`. */
export function exportGraph(e: BackboneExport, format: ExportFormat): { graph: ExportGraph; spec: ExportedSpec } {
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
  return { graph, spec };
}

/**
 * The files of `e`'s TensorFlow.js export, by name: `model.json`, `group1-shard1of1.bin` and
 * `ssl-zoo.json` ({@link ExportedSpec}, with the tfjs weight name of every backbone/projector
 * tensor and the batch norms' update counts, which `readExportedBackbone` uses).
 */
export function tfjsExportFiles(e: BackboneExport): { spec: ExportedSpec; files: Array<[string, Uint8Array | string]> } {
  const { graph, spec } = exportGraph(e, 'tfjs');
  const model = toTfjs(graph, { sslZoo: spec }, `ssl-zoo ${e.sslZooVersion}`);
  const named = [...e.backbone.namedBuffers('backbone'), ...(e.projector?.namedBuffers('projector') ?? [])];
  const counts = named.filter(([name]) => name.endsWith('.numBatchesTracked'));
  const buffers = Object.fromEntries(counts.map(([name, v]) => [name, v.dataSync()[0]!]));
  return {
    spec,
    files: [
      [TFJS_MODEL_FILE, JSON.stringify(model.modelJson)],
      [TFJS_WEIGHTS_FILE, model.weightData],
      [EXPORT_METADATA_FILE, `${JSON.stringify({ ...spec, tfjs: { weights: model.weightNames, buffers } }, null, 2)}\n`],
    ],
  };
}

function perChannel(v: readonly number[], channels: number): number[] {
  return Array.from({ length: channels }, (_, i) => (v.length === 1 ? v[0]! : v[i]!));
}
