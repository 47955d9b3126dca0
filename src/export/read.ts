/**
 * Reads a TensorFlow.js export directory (`ssl-train export --format tfjs`) back into
 * ssl-zoo tensors, so that an exported model can serve as pretrained weights.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { UserError } from '../core/errors.js';
import type { StateDict } from '../core/module.js';
import { tf } from '../core/tf.js';
import { EXPORT_FORMAT_VERSION, EXPORT_METADATA_FILE, TFJS_MODEL_FILE, type ExportedSpec } from './spec.js';

/** A backbone read back from an export directory. */
export interface ExportedBackbone {
  /** The backbone spec (`ssl-zoo.json`). */
  spec: ExportedSpec;
  /** The backbone's state dict (names as `backbone.stateDict()`: `conv1.weight`, `layer1.0.bn1.runningMean`, ...); the caller disposes it. */
  tensors: StateDict;
  /** The projector's state dict when the model was exported `--with-projector` (names as in `projector.stateDict()`). */
  projector?: StateDict;
}

interface ManifestGroup {
  paths: string[];
  weights: Array<{ name: string; shape: number[]; dtype: string }>;
}

function readJson(path: string, what: string): Record<string, unknown> {
  if (!existsSync(path)) throw new UserError(`${what}: ${path} does not exist (not a TensorFlow.js export of ssl-train export)`);
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
  } catch (e) {
    throw new UserError(`${what}: ${path} is not valid JSON (${(e as Error).message.split('\n')[0]})`);
  }
}

/** Every weight of the manifest by tfjs name, as float32 values with their shape. */
function readWeights(dir: string, manifest: ManifestGroup[]): Map<string, { values: Float32Array; shape: number[] }> {
  const out = new Map<string, { values: Float32Array; shape: number[] }>();
  for (const group of manifest) {
    const bytes = Buffer.concat(group.paths.map((p) => readFileSync(join(dir, p))));
    let offset = 0;
    for (const w of group.weights) {
      if (w.dtype !== 'float32') throw new UserError(`exported model: weight ${w.name} is ${w.dtype}, expected float32`);
      const length = w.shape.reduce((n, d) => n * d, 1);
      if (offset + 4 * length > bytes.length) throw new UserError(`exported model: the weight files of ${dir} are shorter than model.json's manifest says`);
      const values = new Float32Array(length);
      Buffer.from(values.buffer).set(bytes.subarray(offset, offset + 4 * length));
      out.set(w.name, { values, shape: w.shape });
      offset += 4 * length;
    }
  }
  return out;
}

/**
 * Reads the TensorFlow.js model that `ssl-train export --format tfjs` wrote to `dir`:
 * `ssl-zoo.json` gives the spec and which tfjs weight holds which ssl-zoo tensor, `model.json`
 * and its weight shards the values. Rebuild the backbone with
 * `createBackbone(spec.backbone, { inChannels, imageSize, cifarStem, norm, mlpHidden, rng })`
 * and `backbone.loadStateDict(tensors)`; it then computes the exported features (the input
 * normalisation of the export is not part of the backbone: apply `spec.normalization`).
 * A missing or foreign directory is a user error.
 */
export function readExportedBackbone(dir: string): ExportedBackbone {
  const meta = readJson(join(dir, EXPORT_METADATA_FILE), 'exported model');
  if (meta.format !== EXPORT_FORMAT_VERSION) throw new UserError(`exported model: ${join(dir, EXPORT_METADATA_FILE)} is not an ${EXPORT_FORMAT_VERSION} file`);
  const tfjs = meta.tfjs as { weights: Record<string, string>; buffers: Record<string, number> } | undefined;
  if (!tfjs) throw new UserError(`exported model: ${dir} is not a TensorFlow.js export (only --format tfjs exports can be read back)`);
  const model = readJson(join(dir, TFJS_MODEL_FILE), 'exported model');
  const weights = readWeights(dir, model.weightsManifest as ManifestGroup[]);
  const parts: Record<'backbone' | 'projector', StateDict> = { backbone: {}, projector: {} };
  for (const [source, tfjsName] of Object.entries(tfjs.weights)) {
    const w = weights.get(tfjsName);
    if (!w) throw new UserError(`exported model: ${TFJS_MODEL_FILE} has no weight ${tfjsName} (for ${source})`);
    const [part, ...rest] = source.split('.') as ['backbone' | 'projector', ...string[]];
    parts[part][rest.join('.')] = tf.tensor(w.values, w.shape);
  }
  for (const [source, count] of Object.entries(tfjs.buffers)) {
    const [part, ...rest] = source.split('.') as ['backbone' | 'projector', ...string[]];
    parts[part][rest.join('.')] = tf.scalar(count, 'int32');
  }
  const spec: Record<string, unknown> = { ...meta };
  delete spec.tfjs;
  const hasProjector = Object.keys(parts.projector).length > 0;
  return { spec: spec as unknown as ExportedSpec, tensors: parts.backbone, ...(hasProjector ? { projector: parts.projector } : {}) };
}
