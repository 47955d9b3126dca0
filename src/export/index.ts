/** Export of trained backbones as TensorFlow.js and ONNX models (`ssl-train export`), and reading a tfjs export back. */
export { buildExportGraph, type ExportGraph, type ExportNode, type ExportOp, type ExportSource, type Param } from './graph.js';
export { toTfjs, TFJS_WEIGHTS_FILE, type TfjsModel } from './tfjs.js';
export { toOnnx, ONNX_OPSET } from './onnx.js';
export { writeExport, type BackboneExport } from './write.js';
export { readExportedBackbone, type ExportedBackbone } from './read.js';
export * from './spec.js';
