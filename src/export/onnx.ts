/**
 * Writes an {@link ExportGraph} as an ONNX model (opset 17, standard ops only), encoded
 * with onnx-proto. The model follows the ONNX convention: input `images` `[N, C, S, S]`
 * (NCHW) float32 in [0, 1]; feature maps are NCHW inside; outputs `features` `[N, F]`
 * (and `projection` `[N, P]`).
 */
import onnxProto from 'onnx-proto';
import type { ExportGraph, ExportNode, Param } from './graph.js';

const { onnx } = onnxProto;

/** The operator set the model declares. */
export const ONNX_OPSET = 17;

const FLOAT = onnx.TensorProto.DataType.FLOAT;
/** Attributes of type float (every other number is an int). */
const FLOAT_ATTRIBUTES = new Set(['epsilon']);
const INT64 = onnx.TensorProto.DataType.INT64;

/** Collects nodes and initializers. */
class OnnxBuilder {
  readonly nodes: InstanceType<typeof onnx.NodeProto>[] = [];
  readonly initializers: InstanceType<typeof onnx.TensorProto>[] = [];

  /** A float32 constant named `name` with the given shape. */
  float(name: string, values: Float32Array, dims: number[]): string {
    const rawData = new Uint8Array(values.buffer.slice(values.byteOffset, values.byteOffset + values.byteLength));
    this.initializers.push(onnx.TensorProto.create({ name, dataType: FLOAT, dims, rawData }));
    return name;
  }

  /** An int64 constant (shapes for Reshape). */
  int64(name: string, values: number[]): string {
    const rawData = new Uint8Array(BigInt64Array.from(values.map(BigInt)).buffer);
    this.initializers.push(onnx.TensorProto.create({ name, dataType: INT64, dims: [values.length], rawData }));
    return name;
  }

  op(opType: string, name: string, inputs: string[], attributes: Record<string, number | number[]> = {}, outputs = 1): string {
    const attribute = Object.entries(attributes).map(([key, value]) =>
      Array.isArray(value)
        ? onnx.AttributeProto.create({ name: key, type: onnx.AttributeProto.AttributeType.INTS, ints: value })
        : FLOAT_ATTRIBUTES.has(key)
          ? onnx.AttributeProto.create({ name: key, type: onnx.AttributeProto.AttributeType.FLOAT, f: value })
          : onnx.AttributeProto.create({ name: key, type: onnx.AttributeProto.AttributeType.INT, i: value }),
    );
    const output = Array.from({ length: outputs }, (_, i) => (i === 0 ? name : `${name}:${i}`));
    this.nodes.push(onnx.NodeProto.create({ opType, name, input: inputs, output, attribute }));
    return name;
  }
}

/** `[k, k, in, out]` (ssl-zoo) -> `[out, in, k, k]` (ONNX Conv). */
function convWeight(w: Param): Float32Array {
  const [k, , cin, cout] = w.shape as [number, number, number, number];
  const out = new Float32Array(w.values.length);
  for (let y = 0; y < k; y++) {
    for (let x = 0; x < k; x++) {
      for (let i = 0; i < cin; i++) {
        for (let o = 0; o < cout; o++) out[((o * cin + i) * k + y) * k + x] = w.values[((y * k + x) * cin + i) * cout + o]!;
      }
    }
  }
  return out;
}

/** Shape `[1, C, 1, 1]` for a per-channel constant applied to an NCHW map, `[C]` for a vector. */
const channelDims = (node: ExportNode, c: number): number[] => (node.shape.length === 3 ? [1, c, 1, 1] : [c]);

/** Adds the ONNX nodes of `node`; returns the name of its output. */
function lowerNode(b: OnnxBuilder, node: ExportNode, inputs: string[]): string {
  const { op, name } = node;
  const [input] = inputs as [string];
  const c = node.shape[node.shape.length - 1]!;
  const pads = (p: number): number[] => [p, p, p, p];
  switch (op.kind) {
    case 'normalize': {
      const centred = b.op('Sub', `${name}/sub`, [input, b.float(`${name}.mean`, op.mean.values, channelDims(node, c))]);
      return b.op('Div', name, [centred, b.float(`${name}.std`, op.std.values, channelDims(node, c))]);
    }
    case 'conv': {
      const w = b.float(`${name}.weight`, convWeight(op.weight), [c, op.weight.shape[2]!, op.kernel, op.kernel]);
      const conv = [input, w, ...(op.bias ? [b.float(`${name}.bias`, op.bias.values, [c])] : [])];
      return b.op('Conv', name, conv, { kernel_shape: [op.kernel, op.kernel], strides: [op.stride, op.stride], pads: pads(op.padding) });
    }
    case 'batchNorm': {
      const params = [op.scale, op.offset, op.mean, op.variance].map((p, i) => b.float(`${name}.${['scale', 'offset', 'mean', 'variance'][i]}`, p.values, [c]));
      return b.op('BatchNormalization', name, [input, ...params], { epsilon: op.eps });
    }
    case 'groupNorm': {
      // [N, C, ...] -> [N, G, rest]; InstanceNormalization normalises each (sample, group)
      // over its values (biased variance); back to the input shape; per-channel affine map.
      const g = op.groups;
      const grouped = b.op('Reshape', `${name}/groups`, [input, b.int64(`${name}.groups_shape`, [0, g, -1])]);
      const ones = b.float(`${name}.group_scale`, new Float32Array(g).fill(1), [g]);
      const zeros = b.float(`${name}.group_offset`, new Float32Array(g), [g]);
      const normed = b.op('InstanceNormalization', `${name}/stats`, [grouped, ones, zeros], { epsilon: op.eps });
      const back = b.op('Reshape', `${name}/ungroup`, [normed, b.op('Shape', `${name}/shape`, [input])]);
      const scaled = b.op('Mul', `${name}/scale`, [back, b.float(`${name}.scale`, op.scale.values, channelDims(node, c))]);
      return b.op('Add', name, [scaled, b.float(`${name}.offset`, op.offset.values, channelDims(node, c))]);
    }
    case 'relu':
      return b.op('Relu', name, [input]);
    case 'maxPool':
      return b.op('MaxPool', name, [input], { kernel_shape: [op.kernel, op.kernel], strides: [op.stride, op.stride], pads: pads(op.padding) });
    case 'globalAvgPool':
      return b.op('Flatten', name, [b.op('GlobalAveragePool', `${name}/pool`, [input])], { axis: 1 });
    case 'flatten':
      // ssl-zoo flattens channels last: NCHW -> NHWC first.
      return b.op('Flatten', name, [b.op('Transpose', `${name}/nhwc`, [input], { perm: [0, 2, 3, 1] })], { axis: 1 });
    case 'dense': {
      const [fin, fout] = op.weight.shape as [number, number];
      const gemm = [input, b.float(`${name}.weight`, op.weight.values, [fin, fout]), ...(op.bias ? [b.float(`${name}.bias`, op.bias.values, [fout])] : [])];
      return b.op('Gemm', name, gemm);
    }
    case 'add':
      return b.op('Add', name, inputs);
  }
}

function valueInfo(name: string, dims: Array<number | string>): InstanceType<typeof onnx.ValueInfoProto> {
  const dim = dims.map((d) => (typeof d === 'string' ? { dimParam: d } : { dimValue: d }));
  return onnx.ValueInfoProto.create({ name, type: { tensorType: { elemType: FLOAT, shape: { dim } } } });
}

/**
 * The ONNX model of `graph` (bytes of a `.onnx` file): input `images` `[N, C, S, S]` (NCHW,
 * the batch axis `N` dynamic), outputs named as in `graph.outputs`. `metadata` is stored as
 * the model's `metadata_props` (string values, JSON-encoded).
 */
export function toOnnx(graph: ExportGraph, metadata: Record<string, unknown>, producerVersion: string): Uint8Array {
  const b = new OnnxBuilder();
  const outputOf = new Map<string, string>([[graph.input.name, graph.input.name]]);
  for (const node of graph.nodes)
    outputOf.set(
      node.name,
      lowerNode(
        b,
        node,
        node.inputs.map((i) => outputOf.get(i)!),
      ),
    );
  const nodeShape = new Map(graph.nodes.map((n) => [n.name, n.shape]));
  const outputs = graph.outputs.map((o) => {
    b.op('Identity', o.name, [outputOf.get(o.node)!]);
    return valueInfo(o.name, ['N', ...nodeShape.get(o.node)!]);
  });
  const [s, , c] = graph.input.shape as [number, number, number];
  const model = onnx.ModelProto.create({
    irVersion: 8,
    producerName: 'ssl-zoo',
    producerVersion,
    opsetImport: [{ domain: '', version: ONNX_OPSET }],
    graph: {
      name: 'ssl_zoo_export',
      node: b.nodes,
      initializer: b.initializers,
      input: [valueInfo(graph.input.name, ['N', c, s, s])],
      output: outputs,
    },
    metadataProps: Object.entries(metadata).map(([key, value]) => ({ key, value: JSON.stringify(value) })),
  });
  return onnx.ModelProto.encode(model).finish();
}
