/**
 * A trained backbone (and optionally its projector) as a small framework-neutral graph of
 * inference ops with their weights: the one place that says how each layer kind of ssl-zoo
 * is exported. The TensorFlow.js and ONNX writers (tfjs.ts, onnx.ts) translate this graph
 * op by op. Batch norm (synchronised or not) exports in inference mode, with its running
 * statistics; group and layer norm keep their per-sample statistics.
 *
 * Shapes in the graph are per sample and channels last: `[H, W, C]` for feature maps,
 * `[F]` for vectors (the batch axis is implicit).
 */
import { BasicBlock, Bottleneck, MlpBackbone, ResNet, TinyResNet, VisionTransformer } from '../backbones/index.js';
import { UserError } from '../core/errors.js';
import { BatchNorm, childLayer, Conv2d, Flatten, GlobalAvgPool, GroupNorm, Identity, LayerNorm, Linear, MaxPool2d, ReLU, Sequential } from '../core/layers.js';
import type { Layer } from '../core/module.js';
import type { Tensor } from '../core/tf.js';

/** A weight of an op: its values, shape, and the ssl-zoo state-dict name it comes from (none for constants such as non-affine ones). */
export interface Param {
  values: Float32Array;
  shape: number[];
  /** Dotted name in the method's state dict (e.g. `backbone.layer1.0.conv1.weight`). */
  source?: string;
}

/** The inference ops of an exported model; tensors are channels last, as in ssl-zoo. */
export type ExportOp =
  /** `(x - mean) / std` per channel, `mean`, `std` `[C]`. */
  | { kind: 'normalize'; mean: Param; std: Param }
  /** Convolution, weight `[k, k, inC, outC]`, bias `[outC]`, PyTorch's symmetric zero padding `padding` pixels per side. */
  | { kind: 'conv'; weight: Param; bias?: Param; kernel: number; stride: number; padding: number }
  /** `(x - mean) / sqrt(variance + eps) · scale + offset` per channel, each `[C]`. */
  | { kind: 'batchNorm'; mean: Param; variance: Param; scale: Param; offset: Param; eps: number }
  /** Group norm with `groups` groups of consecutive channels (per sample, biased variance), then `· scale + offset` `[C]`. */
  | { kind: 'groupNorm'; groups: number; scale: Param; offset: Param; eps: number }
  | { kind: 'relu' }
  /** Max pooling with PyTorch's padding (padded positions never win). */
  | { kind: 'maxPool'; kernel: number; stride: number; padding: number }
  /** `[H, W, C] -> [C]`. */
  | { kind: 'globalAvgPool' }
  /** `[H, W, C] -> [H·W·C]` in channels-last order. */
  | { kind: 'flatten' }
  /** `x W + b`, weight `[in, out]`, bias `[out]`. */
  | { kind: 'dense'; weight: Param; bias?: Param }
  /** Sum of the two inputs. */
  | { kind: 'add' };

/** One op applied to earlier nodes (or the input) by name. */
export interface ExportNode {
  /** Unique; the module path for layers (`backbone.layer1.0.conv1`), with a suffix for ops that are not modules. */
  name: string;
  op: ExportOp;
  inputs: string[];
  /** Output shape per sample, channels last. */
  shape: number[];
}

/** An exported model: images `[B, S, S, C]` in [0, 1] to `features` `[B, F]` (and `projection` `[B, P]`). */
export interface ExportGraph {
  /** Name and per-sample shape `[S, S, C]` of the input. */
  input: { name: string; shape: number[] };
  /** In topological order. */
  nodes: ExportNode[];
  /** Model outputs: `features`, and with a projector `projection`, each naming its node. */
  outputs: Array<{ name: string; node: string }>;
}

/** A node reference while building: name and per-sample shape. */
interface Ref {
  name: string;
  shape: number[];
}

function param(tensor: Tensor, source: string | undefined): Param {
  return { values: Float32Array.from(tensor.dataSync() as Float32Array), shape: [...tensor.shape], source };
}

function constant(length: number, value: number): Param {
  return { values: new Float32Array(length).fill(value), shape: [length] };
}

/** Builds the node list, giving every node a unique name. */
class GraphBuilder {
  readonly nodes: ExportNode[] = [];
  private readonly names = new Set<string>();

  constructor(readonly inputName: string) {
    this.names.add(inputName);
  }

  add(name: string, op: ExportOp, inputs: Ref[], shape: number[]): Ref {
    let unique = name;
    for (let i = 2; this.names.has(unique); i++) unique = `${name}_${i}`;
    this.names.add(unique);
    this.nodes.push({ name: unique, op, inputs: inputs.map((r) => r.name), shape });
    return { name: unique, shape };
  }
}

function unsupported(path: string, why: string): UserError {
  return new UserError(`export: cannot export ${path}: ${why}`);
}

function spatial(path: string, x: Ref): [number, number, number] {
  if (x.shape.length !== 3) throw unsupported(path, `expects a feature map [H, W, C], got [${x.shape}]`);
  return x.shape as [number, number, number];
}

function pooledSize(size: number, kernel: number, stride: number, padding: number): number {
  return Math.floor((size + 2 * padding - kernel) / stride) + 1;
}

const prefixed = (path: string, name: string): string => (path ? `${path}.${name}` : name);

/** Lowers `layer` (at module path `path`) applied to `x`; the mapping of every exportable layer kind. */
function lower(b: GraphBuilder, layer: Layer, path: string, x: Ref): Ref {
  const child = (name: string, h: Ref): Ref => lower(b, childLayer(layer, name), prefixed(path, name), h);
  const relu = (name: string, h: Ref): Ref => b.add(prefixed(path, name), { kind: 'relu' }, [h], h.shape);
  if (layer instanceof Conv2d) {
    const [h, w] = spatial(path, x);
    const padding = layer.padding === 'valid' ? 0 : layer.padding;
    if (typeof padding !== 'number') throw unsupported(path, `padding '${padding}' has no PyTorch equivalent (export supports integer padding)`);
    const { kernel, stride } = layer;
    const out = [pooledSize(h, kernel, stride, padding), pooledSize(w, kernel, stride, padding), layer.outChannels];
    const bias = layer.bias && param(layer.bias, `${path}.bias`);
    return b.add(path, { kind: 'conv', weight: param(layer.weight, `${path}.weight`), bias, kernel, stride, padding }, [x], out);
  }
  if (layer instanceof BatchNorm) {
    // SyncBatchNorm is a BatchNorm: in inference mode both use the running statistics.
    const c = layer.numFeatures;
    const scale = layer.weight ? param(layer.weight, `${path}.weight`) : constant(c, 1);
    const offset = layer.bias ? param(layer.bias, `${path}.bias`) : constant(c, 0);
    const [mean, variance] = [param(layer.runningMean, `${path}.runningMean`), param(layer.runningVar, `${path}.runningVar`)];
    return b.add(path, { kind: 'batchNorm', mean, variance, scale, offset, eps: layer.eps }, [x], x.shape);
  }
  if (layer instanceof GroupNorm || layer instanceof LayerNorm) {
    // LayerNorm(C) normalises the last axis: on a vector it is GroupNorm(1, C); on a map it is per pixel, which has no mapping here.
    if (layer instanceof LayerNorm && x.shape.length !== 1) throw unsupported(path, `LayerNorm over the channels of a feature map [${x.shape}]`);
    const c = layer instanceof GroupNorm ? layer.numChannels : layer.normalizedShape;
    const groups = layer instanceof GroupNorm ? layer.numGroups : 1;
    const scale = layer.weight ? param(layer.weight, `${path}.weight`) : constant(c, 1);
    const offset = layer.bias ? param(layer.bias, `${path}.bias`) : constant(c, 0);
    return b.add(path, { kind: 'groupNorm', groups, scale, offset, eps: layer.eps }, [x], x.shape);
  }
  if (layer instanceof Linear) {
    if (x.shape.length !== 1) throw unsupported(path, `Linear expects a vector, got [${x.shape}]`);
    const bias = layer.bias && param(layer.bias, `${path}.bias`);
    return b.add(path, { kind: 'dense', weight: param(layer.weight, `${path}.weight`), bias }, [x], [layer.outFeatures]);
  }
  if (layer instanceof ReLU) return b.add(path, { kind: 'relu' }, [x], x.shape);
  if (layer instanceof Identity) return x;
  if (layer instanceof MaxPool2d) {
    const [h, w, c] = spatial(path, x);
    const { kernel, stride, padding } = layer;
    return b.add(path, { kind: 'maxPool', kernel, stride, padding }, [x], [pooledSize(h, kernel, stride, padding), pooledSize(w, kernel, stride, padding), c]);
  }
  if (layer instanceof GlobalAvgPool) return b.add(path, { kind: 'globalAvgPool' }, [x], [spatial(path, x)[2]]);
  if (layer instanceof Flatten) return flatten(b, path, x);
  if (layer instanceof Sequential) return layer.namedChildren().reduce((h, [name]) => child(name, h), x);
  if (layer instanceof BasicBlock || layer instanceof Bottleneck) {
    // conv1 bn1 relu [conv2 bn2 relu] convN bnN, + shortcut, relu (the blocks' forward).
    const convs = layer instanceof Bottleneck ? 3 : 2;
    let h = x;
    for (let i = 1; i <= convs; i++) {
      h = child(`bn${i}`, child(`conv${i}`, h));
      if (i < convs) h = relu(`relu${i}`, h);
    }
    const shortcut = layer.hasDownsample ? child('downsample', x) : x;
    return relu('relu', b.add(prefixed(path, 'add'), { kind: 'add' }, [h, shortcut], h.shape));
  }
  if (layer instanceof ResNet || layer instanceof TinyResNet) {
    // Stem conv1, bn1, ReLU, then every other child in registration order (the forward's stages).
    const stem = relu('relu', child('bn1', child('conv1', x)));
    const stages = layer.namedChildren().filter(([name]) => name !== 'conv1' && name !== 'bn1');
    return stages.reduce((h, [name]) => child(name, h), stem);
  }
  if (layer instanceof MlpBackbone) {
    return layer.hidden.reduce((h, _, i) => relu(`relu${i + 1}`, child(`bn${i + 1}`, child(`fc${i + 1}`, h))), flatten(b, prefixed(path, 'flatten'), x));
  }
  throw unsupported(path, `no export mapping for layer ${layer.constructor.name}`);
}

function flatten(b: GraphBuilder, path: string, x: Ref): Ref {
  return x.shape.length === 1 ? x : b.add(path, { kind: 'flatten' }, [x], [x.shape.reduce((n, d) => n * d, 1)]);
}

/** What {@link buildExportGraph} exports. */
export interface ExportSource {
  /** The backbone, in eval mode (its forward must be the exported one). */
  backbone: Layer;
  /** The method's projector (`[B, F] -> [B, P]`), exported as a second output. */
  projector?: Layer;
  /** Per-sample input shape `[S, S, C]`. */
  inputShape: [number, number, number];
  /** Per-channel normalisation of the [0, 1] input, `[C]` each (`mean.length` 1 applies to every channel). */
  mean: readonly number[];
  std: readonly number[];
}

/**
 * The inference graph of `source`: input `images` `[S, S, C]` in [0, 1], per-channel
 * normalisation, the backbone (module names under `backbone.`), output `features`; with a
 * projector, also `projection` (names under `projector.`). Weights are copied.
 */
export function buildExportGraph(source: ExportSource): ExportGraph {
  const b = new GraphBuilder('images');
  const channels = source.inputShape[2];
  const perChannel = (v: readonly number[]): number[] => Array.from({ length: channels }, (_, i) => (v.length === 1 ? v[0]! : v[i]!));
  const stats = (v: readonly number[]): Param => ({ values: Float32Array.from(perChannel(v)), shape: [channels] });
  const input: Ref = { name: 'images', shape: [...source.inputShape] };
  const normalized = b.add('input_normalization', { kind: 'normalize', mean: stats(source.mean), std: stats(source.std) }, [input], input.shape);
  if (source.backbone instanceof VisionTransformer) {
    throw unsupported(
      'backbone',
      'Vision Transformers (vit_tiny, vit_small) have no tfjs/ONNX export mapping yet; export supports resnet18, resnet50, tiny_resnet and mlp',
    );
  }
  const features = lower(b, source.backbone, 'backbone', normalized);
  if (features.shape.length !== 1) throw unsupported('backbone', `its output is not a feature vector but [${features.shape}]`);
  const outputs = [{ name: 'features', node: features.name }];
  if (source.projector) outputs.push({ name: 'projection', node: lower(b, source.projector, 'projector', features).name });
  return { input: { name: input.name, shape: input.shape }, nodes: b.nodes, outputs };
}
