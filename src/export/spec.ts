/** The files and the metadata of an exported model directory (`ssl-train export`). */
import type { NormKind } from '../core/layers.js';

/** The export formats of `--format`. */
export const EXPORT_FORMATS = ['tfjs', 'onnx'] as const;
export type ExportFormat = (typeof EXPORT_FORMATS)[number];

/** Version tag of {@link ExportedSpec}. */
export const EXPORT_FORMAT_VERSION = 'ssl-zoo-export/1';
/** The metadata file of an export directory. */
export const EXPORT_METADATA_FILE = 'ssl-zoo.json';
/** The TensorFlow.js topology and weights manifest. */
export const TFJS_MODEL_FILE = 'model.json';
/** The ONNX model. */
export const ONNX_MODEL_FILE = 'model.onnx';

/**
 * What an exported model is (`ssl-zoo.json`, and `userDefinedMetadata.sslZoo` of
 * `model.json` / the `sslZoo` entry of the ONNX `metadata_props`): enough to rebuild the
 * backbone with `createBackbone(backbone, { inChannels, imageSize, cifarStem, norm, mlpHidden })`.
 */
export interface ExportedSpec {
  format: typeof EXPORT_FORMAT_VERSION;
  /** Registered backbone name (`resnet18`, `tiny_resnet`, `mlp`, ...). */
  backbone: string;
  inChannels: number;
  /** Height and width of the input images. */
  imageSize: number;
  cifarStem: boolean;
  norm: NormKind;
  /** `mlp` only: hidden widths. */
  mlpHidden?: number[];
  /** The per-channel normalisation the model applies first: `(x - mean) / std`, x in [0, 1]. */
  normalization: { mean: number[]; std: number[] };
  featureDim: number;
  /** With `--with-projector`: width of the `projection` output. */
  projectionDim?: number;
  /** The model's input: float32 pixels in [0, 1] (divide 8-bit values by 255), NHWC (tfjs) or NCHW (ONNX). */
  input: { name: string; layout: 'NHWC' | 'NCHW'; range: [0, 1] };
  /** Output names in order: `features` `[B, featureDim]`, then `projection` `[B, projectionDim]`. */
  outputs: string[];
  sslZooVersion: string;
  /** Where the weights come from (absent for models exported from memory). */
  source?: { runDir: string; method: string; dataset?: string; checkpoint: string; step?: number };
}
