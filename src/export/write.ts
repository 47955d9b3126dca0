/**
 * Writes an export directory from a backbone in memory: the model files of one format and
 * `ssl-zoo.json` (the tfjs files come from `backbone-files.ts`, which the browser page
 * shares), all-or-nothing (a temporary directory beside the target, then a rename).
 */
import { existsSync, mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { atPath } from '../core/errors.js';
import { exportGraph, tfjsExportFiles, type BackboneExport } from './backbone-files.js';
import { toOnnx } from './onnx.js';
import { EXPORT_METADATA_FILE, ONNX_MODEL_FILE, type ExportFormat, type ExportedSpec } from './spec.js';

export type { BackboneExport } from './backbone-files.js';

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
 * checks whether it may be): `tfjs` writes the files of {@link tfjsExportFiles}
 * (`model.json`, `group1-shard1of1.bin`), `onnx` writes `model.onnx`; both write
 * `ssl-zoo.json`. Returns the spec and the file names.
 */
export function writeExport(e: BackboneExport, format: ExportFormat, out: string): { spec: ExportedSpec; files: string[] } {
  const { spec, files } = format === 'tfjs' ? tfjsExportFiles(e) : onnxExportFiles(e);
  writeDirAtomic(out, files);
  return { spec, files: files.map(([name]) => name) };
}

/** `model.onnx` and `ssl-zoo.json` of `e`. */
function onnxExportFiles(e: BackboneExport): { spec: ExportedSpec; files: Array<[string, Uint8Array | string]> } {
  const { graph, spec } = exportGraph(e, 'onnx');
  return {
    spec,
    files: [
      [ONNX_MODEL_FILE, toOnnx(graph, { sslZoo: spec }, e.sslZooVersion)],
      [EXPORT_METADATA_FILE, `${JSON.stringify(spec, null, 2)}\n`],
    ],
  };
}
