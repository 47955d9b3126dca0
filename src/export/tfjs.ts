/**
 * Writes an {@link ExportGraph} as a TensorFlow.js layers model: a Keras-style functional
 * topology (`model.json`, loaded by `tf.loadLayersModel`) and one float32 weight shard.
 * Only built-in layer classes are used (no custom or Lambda layers), so any tfjs-layers
 * 4.x loads it, in Node and in a browser.
 */
import type { ExportGraph, ExportNode, Param } from './graph.js';

/** The name of the single weight shard next to `model.json`. */
export const TFJS_WEIGHTS_FILE = 'group1-shard1of1.bin';

/** A layers model in memory. */
export interface TfjsModel {
  /** The content of `model.json`. */
  modelJson: Record<string, unknown>;
  /** The bytes of {@link TFJS_WEIGHTS_FILE}: every weight, float32 little-endian, in manifest order. */
  weightData: Uint8Array;
  /** ssl-zoo state-dict name -> tfjs weight name (`<layer>/<weight>`), for every exported weight that has one. */
  weightNames: Record<string, string>;
}

interface KerasLayer {
  class_name: string;
  name: string;
  config: Record<string, unknown>;
  inbound_nodes: Array<Array<[string, number, number, Record<string, never>]>>;
}

/** Collects layers and their weights in order. */
class TopologyBuilder {
  readonly layers: KerasLayer[] = [];
  readonly weights: Array<{ name: string; param: Param }> = [];
  readonly weightNames: Record<string, string> = {};
  private readonly names = new Set<string>();

  add(className: string, name: string, config: Record<string, unknown>, inputs: string[], weights: Array<[string, Param]> = []): string {
    if (this.names.has(name)) throw new Error(`tfjs export: duplicate layer name '${name}'`);
    this.names.add(name);
    const inbound = inputs.length === 0 ? [] : [inputs.map((i): [string, number, number, Record<string, never>] => [i, 0, 0, {}])];
    this.layers.push({ class_name: className, name, config: { name, trainable: false, ...config }, inbound_nodes: inbound });
    for (const [weightName, param] of weights) {
      const full = `${name}/${weightName}`;
      this.weights.push({ name: full, param });
      if (param.source) this.weightNames[param.source] = full;
    }
    return name;
  }

  /** A `BatchNormalization` layer (inference: `(x - mean) / sqrt(variance + eps) · gamma + beta` on the last axis). */
  batchNorm(name: string, input: string, eps: number, gamma: Param, beta: Param, mean: Param, variance: Param): string {
    const config = { axis: -1, momentum: 0.99, epsilon: eps, center: true, scale: true };
    return this.add(
      'BatchNormalization',
      name,
      config,
      [input],
      [
        ['gamma', gamma],
        ['beta', beta],
        ['moving_mean', mean],
        ['moving_variance', variance],
      ],
    );
  }
}

const filled = (length: number, value: number): Param => ({ values: new Float32Array(length).fill(value), shape: [length] });

/** Adds the layers of `node` (input layer name `input`); returns the name of the layer that gives its output. */
function lowerNode(t: TopologyBuilder, node: ExportNode, inputs: string[], opOf: (name: string) => ExportNode['op'] | undefined): string {
  const { op, name } = node;
  const [input] = inputs as [string];
  const channels = node.shape[node.shape.length - 1]!;
  const padded = (padding: number): string =>
    padding === 0
      ? input
      : t.add(
          'ZeroPadding2D',
          `${name}_pad`,
          {
            padding: [
              [padding, padding],
              [padding, padding],
            ],
            data_format: 'channels_last',
          },
          [input],
        );
  switch (op.kind) {
    case 'normalize': {
      // (x - mean) / std as an inference batch norm with variance std² and eps 0.
      const variance = { values: op.std.values.map((s) => s * s), shape: op.std.shape };
      return t.batchNorm(name, input, 0, filled(channels, 1), filled(channels, 0), op.mean, variance);
    }
    case 'conv': {
      const config = {
        filters: channels,
        kernel_size: [op.kernel, op.kernel],
        strides: [op.stride, op.stride],
        padding: 'valid',
        data_format: 'channels_last',
        dilation_rate: [1, 1],
        activation: 'linear',
        use_bias: op.bias !== undefined,
      };
      const weights: Array<[string, Param]> = [['kernel', op.weight]];
      if (op.bias) weights.push(['bias', op.bias]);
      return t.add('Conv2D', name, config, [padded(op.padding)], weights);
    }
    case 'batchNorm':
      return t.batchNorm(name, input, op.eps, op.scale, op.offset, op.mean, op.variance);
    case 'groupNorm': {
      // [H, W, C] -> [H·W, G, C/G] (or [C] -> [G, C/G]), statistics per sample and group
      // (LayerNormalization over every axis but the batch and group axes), back to the
      // input shape, then the per-channel affine map as a batch norm with mean 0, variance 1, eps 0.
      const g = op.groups;
      const spatialSize = node.shape.slice(0, -1).reduce((n, d) => n * d, 1);
      const grouped = node.shape.length === 1 ? [g, channels / g] : [spatialSize, g, channels / g];
      const axis = node.shape.length === 1 ? [2] : [1, 3];
      const reshaped = t.add('Reshape', `${name}_groups`, { target_shape: grouped }, [input]);
      const normed = t.add('LayerNormalization', `${name}_stats`, { axis, epsilon: op.eps, center: false, scale: false }, [reshaped]);
      const back = t.add('Reshape', `${name}_ungroup`, { target_shape: node.shape }, [normed]);
      return t.batchNorm(name, back, 0, op.scale, op.offset, filled(channels, 0), filled(channels, 1));
    }
    case 'relu':
      return t.add('Activation', name, { activation: 'relu' }, [input]);
    case 'maxPool': {
      // Zero padding equals PyTorch's -inf padding only on non-negative inputs (ResNet's pool follows a ReLU).
      if (op.padding > 0 && opOf(node.inputs[0]!)?.kind !== 'relu') {
        throw new Error(`tfjs export: padded max pooling '${name}' needs a non-negative (ReLU) input`);
      }
      const config = { pool_size: [op.kernel, op.kernel], strides: [op.stride, op.stride], padding: 'valid', data_format: 'channels_last' };
      return t.add('MaxPooling2D', name, config, [padded(op.padding)]);
    }
    case 'globalAvgPool':
      return t.add('GlobalAveragePooling2D', name, { data_format: 'channels_last' }, [input]);
    case 'flatten':
      return t.add('Flatten', name, { data_format: 'channels_last' }, [input]);
    case 'dense': {
      const weights: Array<[string, Param]> = [['kernel', op.weight]];
      if (op.bias) weights.push(['bias', op.bias]);
      return t.add('Dense', name, { units: channels, activation: 'linear', use_bias: op.bias !== undefined }, [input], weights);
    }
    case 'add':
      return t.add('Add', name, {}, inputs);
  }
}

/**
 * The layers model of `graph`: input `graph.input.name` `[B, S, S, C]` float32 in [0, 1]
 * (NHWC), outputs in the order of `graph.outputs` (`features` `[B, F]`, then `projection`).
 * `metadata` goes to `model.json`'s `userDefinedMetadata` (`model.getUserDefinedMetadata()`).
 */
export function toTfjs(graph: ExportGraph, metadata: Record<string, unknown>, generatedBy: string): TfjsModel {
  const t = new TopologyBuilder();
  const input = graph.input.name;
  t.add('InputLayer', input, { batch_input_shape: [null, ...graph.input.shape], dtype: 'float32', sparse: false }, []);
  const layerOf = new Map<string, string>([[input, input]]);
  const ops = new Map(graph.nodes.map((n) => [n.name, n.op]));
  for (const node of graph.nodes) {
    const inputs = node.inputs.map((i) => layerOf.get(i)!);
    layerOf.set(
      node.name,
      lowerNode(t, node, inputs, (name) => ops.get(name)),
    );
  }
  const total = t.weights.reduce((n, w) => n + w.param.values.length, 0);
  const data = new Float32Array(total);
  let offset = 0;
  for (const { param } of t.weights) {
    data.set(param.values, offset);
    offset += param.values.length;
  }
  const modelJson = {
    format: 'layers-model',
    generatedBy,
    convertedBy: null,
    modelTopology: {
      class_name: 'Model',
      config: {
        name: 'ssl_zoo_export',
        layers: t.layers,
        input_layers: [[input, 0, 0]],
        output_layers: graph.outputs.map((o) => [layerOf.get(o.node)!, 0, 0]),
      },
      keras_version: 'tfjs-layers 4.22.0',
      backend: 'tensor_flow.js',
    },
    weightsManifest: [{ paths: [TFJS_WEIGHTS_FILE], weights: t.weights.map((w) => ({ name: w.name, shape: w.param.shape, dtype: 'float32' })) }],
    userDefinedMetadata: metadata,
  };
  const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  return { modelJson, weightData: bytes, weightNames: t.weightNames };
}
