/**
 * A pre-trained backbone from a run directory, a checkpoint file or a TensorFlow.js export
 * (`ssl-train export --format tfjs`): where its weights are, the configuration that rebuilds
 * its model, and loading its tensors into a method.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { UserError } from '../core/errors.js';
import { tf, type Tensor } from '../core/tf.js';
import { EXPORT_METADATA_FILE, readExportedBackbone, TFJS_MODEL_FILE, type ExportedSpec } from '../export/index.js';
import type { BaseMethod } from '../methods/base.js';
import { MomentumMethod } from '../methods/momentum.js';
import { findLatestCheckpoint, loadCheckpoint, savedProgress, verifyCheckpoint, withoutPrefix } from '../trainer/checkpoint.js';
import { runDirPaths } from '../trainer/run-dir.js';
import { buildConfig, CONFIG_KEYS, type TrainConfig, type TrainConfigInput } from './config.js';

/** Where a pre-trained backbone comes from. */
export interface PretrainedSource {
  /** The path as given (run directory, checkpoint or export directory). */
  path: string;
  /** `checkpoint` (a run directory's or a file) or `export` (a TensorFlow.js export directory). */
  kind: 'checkpoint' | 'export';
  /** The checkpoint file read, or the export directory. */
  checkpointPath: string;
  /** The training configuration stored in the checkpoint (options only, rebuilt and validated). */
  config: TrainConfig;
  /** Optimizer step of the checkpoint (0 when it records none); that of the weights once they are loaded. */
  step: number;
}

/** The tensor-name prefix of the backbone's weights inside a checkpoint. */
const BACKBONE_PREFIX = 'model/backbone.';

/**
 * A training configuration from a resolved one (`config.json`, or a checkpoint's
 * `meta.config`): its options only, validated; `where` names the source in the message
 * of the user error raised when it does not rebuild.
 */
export function trainConfigFromResolved(resolved: Record<string, unknown>, where: string): TrainConfig {
  const input: Record<string, unknown> = {};
  for (const key of CONFIG_KEYS) if (resolved[key] !== undefined && resolved[key] !== null) input[key] = resolved[key];
  try {
    return buildConfig(input as TrainConfigInput);
  } catch (e) {
    throw new UserError(`${where}: its configuration does not rebuild the model (${(e as Error).message})`);
  }
}

/**
 * Resolves `path` given to `flag` (e.g. `--pretrained`, `RUN_DIR`): a run directory (its
 * newest valid checkpoint) or a checkpoint file. A missing path, a directory without a
 * usable checkpoint, or a file that is not a trainer checkpoint are user errors naming
 * `flag` and the path.
 */
export function resolvePretrained(path: string, flag: string): PretrainedSource {
  if (!existsSync(path)) throw new UserError(`${flag}: ${path} does not exist; expected a run directory, a checkpoint file or an export directory`);
  let checkpointPath = path;
  if (statSync(path).isDirectory() && existsSync(join(path, EXPORT_METADATA_FILE))) return exportedSource(path, flag);
  if (statSync(path).isDirectory()) {
    const dir = runDirPaths(path).checkpoints;
    const search = findLatestCheckpoint(dir);
    if (!search.latest) {
      const why = search.skipped.map((s) => `${s.path} ${s.reason}`).join('; ');
      throw new UserError(
        `${flag}: ${path} has no usable checkpoint (${search.found === 0 ? `no *.ckpt in ${dir}` : why}); expected a run directory with checkpoints/last.ckpt`,
      );
    }
    checkpointPath = search.latest.path;
  }
  // The header and a checksum pass only: no tensor is made before the engine is chosen.
  const check = verifyCheckpoint(checkpointPath);
  if (!check.ok) throw new UserError(`${flag}: ${checkpointPath} ${check.reason}`);
  const meta = check.meta;
  if (typeof meta.config !== 'object' || meta.config === null)
    throw new UserError(`${flag}: ${checkpointPath} records no configuration (not an ssl-zoo training checkpoint)`);
  return {
    path,
    kind: 'checkpoint',
    checkpointPath,
    config: trainConfigFromResolved(meta.config as Record<string, unknown>, `${flag}: ${checkpointPath}`),
    step: savedProgress(meta)?.step ?? 0,
  };
}

/**
 * An export directory as a source: the backbone's architecture from its `ssl-zoo.json`, the
 * data set of the run it came from (an evaluation can choose another with `--dataset`).
 */
function exportedSource(dir: string, flag: string): PretrainedSource {
  if (!existsSync(join(dir, TFJS_MODEL_FILE))) {
    throw new UserError(`${flag}: ${dir} is not a TensorFlow.js export (no ${TFJS_MODEL_FILE}); only --format tfjs exports can be read back as weights`);
  }
  let spec: ExportedSpec;
  try {
    spec = JSON.parse(readFileSync(join(dir, EXPORT_METADATA_FILE), 'utf8')) as ExportedSpec;
  } catch (e) {
    throw new UserError(`${flag}: ${join(dir, EXPORT_METADATA_FILE)} is not valid JSON (${(e as Error).message.split('\n')[0]})`);
  }
  const input: TrainConfigInput = { backbone: spec.backbone, cifarStem: spec.cifarStem, norm: spec.norm, imageSize: spec.imageSize, channels: spec.inChannels };
  if (spec.source?.dataset !== undefined) input.dataset = spec.source.dataset;
  if (spec.source?.method !== undefined) input.method = spec.source.method;
  return { path: dir, kind: 'export', checkpointPath: dir, config: trainConfigFromResolved(input, `${flag}: ${dir}`), step: spec.source?.step ?? 0 };
}

/** The backbone tensors of `source` (names as `backbone.stateDict()`); the caller disposes them. */
function backboneTensors(source: PretrainedSource): Record<string, Tensor> {
  if (source.kind === 'export') {
    const exported = readExportedBackbone(source.checkpointPath);
    if (exported.projector) tf.dispose(Object.values(exported.projector));
    return exported.tensors;
  }
  const { tensors, meta } = loadCheckpoint(source.checkpointPath);
  // A run still training may have replaced last.ckpt since it was resolved: the step recorded is that of the weights read.
  source.step = savedProgress(meta)?.step ?? 0;
  const backbone = withoutPrefix(tensors, BACKBONE_PREFIX);
  tf.dispose(
    Object.entries(tensors)
      .filter(([name]) => !name.startsWith(BACKBONE_PREFIX))
      .map(([, t]) => t),
  );
  return backbone;
}

/**
 * Loads the backbone weights of `source` into `method.backbone` (its heads and classifier
 * keep their fresh initialisation; an EMA target network is re-copied from the loaded
 * online network). The backbone of the checkpoint must match the method's tensor for
 * tensor: otherwise a user error of `flag` names the first tensor that differs.
 */
export function loadPretrainedBackbone(method: BaseMethod, source: PretrainedSource, flag: string): void {
  const saved = backboneTensors(source);
  try {
    const own = method.backbone.stateDict();
    const theirs = `${source.checkpointPath} (backbone ${source.config.backbone}, trained on ${source.config.dataset})`;
    const missing = Object.keys(own).find((name) => !(name in saved));
    const extra = Object.keys(saved).find((name) => !(name in own));
    if (missing !== undefined || extra !== undefined) {
      const what = missing !== undefined ? `it has no tensor backbone.${missing}` : `it has backbone.${extra}, which this model lacks`;
      throw new UserError(`${flag}: the backbone of ${theirs} does not match this model's (${method.backbone.constructor.name}): ${what}`);
    }
    for (const [name, variable] of Object.entries(own)) {
      if (!tf.util.arraysEqual(saved[name].shape, variable.shape)) {
        throw new UserError(
          `${flag}: the backbone of ${theirs} does not match this model's: backbone.${name} is [${saved[name].shape.join(', ')}] there and ` +
            `[${variable.shape.join(', ')}] here (different backbone, channels or image size)`,
        );
      }
    }
    method.backbone.loadStateDict(saved);
    if (method instanceof MomentumMethod) method.resetTargets();
  } finally {
    tf.dispose(Object.values(saved));
  }
}
