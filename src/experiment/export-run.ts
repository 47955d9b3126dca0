/**
 * `ssl-train export`: a run directory's trained backbone (and projector) as a TensorFlow.js
 * layers model or an ONNX model, with its spec in `ssl-zoo.json`. Everything is written
 * into a temporary directory beside `--out` and renamed into place at the end, so a failed
 * export leaves nothing half written.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, resolve } from 'node:path';
import { engineInfo, initEngine } from '../core/engine.js';
import { invalidValue, UserError } from '../core/errors.js';
import { childLayer } from '../core/layers.js';
import { packageVersion } from '../core/package-root.js';
import { tf } from '../core/tf.js';
import { evalTransform } from '../data/augment/recipes.js';
import { findLatestCheckpoint, loadCheckpoint, savedProgress, withoutPrefix } from '../trainer/checkpoint.js';
import { runDirPaths } from '../trainer/run-dir.js';
import { EXPORT_FORMATS, writeExport, type ExportFormat, type ExportedSpec } from '../export/index.js';
import type { TrainConfig } from './config.js';
import { trainConfigFromResolved } from './pretrained.js';
import { prepareExperiment } from './experiment.js';

/** Options of {@link exportRun} (the CLI's flags). */
export interface ExportOptions {
  format: string;
  out: string;
  /** Also export the method's projector, as the second output `projection`. */
  withProjector?: boolean;
  /** Replace a non-empty `out`. */
  force?: boolean;
}

/** What {@link exportRun} wrote. */
export interface ExportResult {
  out: string;
  files: string[];
  spec: ExportedSpec;
}

/** Checks the flags before anything is loaded. */
function checkOptions(runDir: string, options: ExportOptions): ExportFormat {
  if (!options.format) throw new UserError(`--format: missing; expected ${EXPORT_FORMATS.join(' | ')}`);
  if (!EXPORT_FORMATS.includes(options.format as ExportFormat)) throw invalidValue('--format', options.format, EXPORT_FORMATS.join(' | '));
  if (!options.out) throw new UserError('--out: missing; expected the directory to write the model into');
  if (existsSync(options.out)) {
    if (!statSync(options.out).isDirectory()) throw new UserError(`--out: ${options.out} exists and is not a directory`);
    if (readdirSync(options.out).length > 0 && !options.force) {
      throw new UserError(`--out: ${options.out} exists and is not empty; pass --force to replace it`);
    }
  }
  if (!existsSync(runDir) || !statSync(runDir).isDirectory()) throw new UserError(`export: run directory ${runDir} does not exist`);
  if (!existsSync(runDirPaths(runDir).config)) throw new UserError(`export: ${runDir} is not a run directory (no config.json)`);
  return options.format as ExportFormat;
}

/** The run's training config from its resolved `config.json` (only the options). */
function runConfig(runDir: string): TrainConfig {
  const path = runDirPaths(runDir).config;
  let saved: Record<string, unknown>;
  try {
    saved = JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
  } catch (e) {
    throw new UserError(`export: ${path} is not valid JSON (${(e as Error).message.split('\n')[0]})`);
  }
  return trainConfigFromResolved(saved, `export: ${path}`);
}

/**
 * Exports the backbone of the run in `runDir` (its newest valid checkpoint) in `format`
 * (`tfjs`: `model.json` + `group1-shard1of1.bin`; `onnx`: `model.onnx`), with
 * `ssl-zoo.json`, into `out`. Bad flags, a missing run or checkpoint are user errors.
 */
export async function exportRun(runDir: string, options: ExportOptions): Promise<ExportResult> {
  const format = checkOptions(runDir, options);
  const search = findLatestCheckpoint(runDirPaths(runDir).checkpoints);
  if (!search.latest) {
    const why = search.found > 0 ? `none of its ${search.found} checkpoints is valid` : 'it has no checkpoint (checkpoints/*.ckpt)';
    throw new UserError(`export: cannot export ${runDir}: ${why}`);
  }
  const config = runConfig(runDir);
  if (!engineInfo()) await initEngine(config.backend === 'cpu-js' ? 'cpu-js' : 'auto');
  const experiment = prepareExperiment(config);
  const method = experiment.createMethod();
  try {
    const checkpoint = loadCheckpoint(search.latest.path);
    let step: number | undefined;
    try {
      method.loadStateDict(withoutPrefix(checkpoint.tensors, 'model/'));
      step = savedProgress(checkpoint.meta)?.step;
    } finally {
      tf.dispose(Object.values(checkpoint.tensors));
    }
    method.eval();
    const hasProjector = method.namedChildren().some(([name]) => name === 'projector');
    if (options.withProjector && !hasProjector) throw new UserError(`--with-projector: method '${config.method}' has no projector`);
    const projector = options.withProjector ? childLayer(method, 'projector') : undefined;
    const { train } = experiment;
    const { mean, std } = evalTransform(train);
    const source = { runDir: resolve(runDir), method: config.method, dataset: config.dataset, checkpoint: basename(search.latest.path), step };
    const exported = { backbone: method.backbone, projector, name: config.backbone, inChannels: train.channels, imageSize: train.height };
    const written = writeExport(
      { ...exported, cifarStem: experiment.cifarStem, norm: config.norm, mean, std, sslZooVersion: packageVersion(), source },
      format,
      options.out,
    );
    return { out: options.out, ...written };
  } finally {
    method.dispose();
  }
}
