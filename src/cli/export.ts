import { Command } from 'commander';

/** Options of the `export` command as commander parses them. */
interface ExportCliOptions {
  format?: string;
  out?: string;
  withProjector?: boolean;
  force?: boolean;
}

/** `ssl-train export RUN_DIR --format tfjs|onnx --out DIR`: the trained backbone as a TensorFlow.js or ONNX model. */
export function exportCommand(): Command {
  return new Command('export')
    .description(
      "export a run's trained backbone (its newest checkpoint, batch norm in inference mode) as a TensorFlow.js layers model or an ONNX model; " +
        'input: float32 pixels in [0, 1] (NHWC for tfjs, NCHW for ONNX), the normalisation is inside the model',
    )
    .argument('<run-dir>', 'run directory (config.json and checkpoints/)')
    .option('--format <format>', 'tfjs (model.json + weights, for tf.loadLayersModel) or onnx (model.onnx)')
    .option('--out <dir>', 'directory to write the model and ssl-zoo.json into (created; must be empty unless --force)')
    .option('--with-projector', "also export the method's projector, as a second output 'projection'")
    .option('--force', 'replace --out when it is not empty')
    .action(async (runDir: string, opts: ExportCliOptions) => {
      // Loaded on demand, as compare's report code: the export pulls in the ONNX encoder.
      const { exportRun } = await import('../experiment/export-run.js');
      const result = await exportRun(runDir, { format: opts.format ?? '', out: opts.out ?? '', withProjector: opts.withProjector, force: opts.force });
      process.stdout.write(`${JSON.stringify({ out: result.out, files: result.files, featureDim: result.spec.featureDim, input: result.spec.input })}\n`);
    });
}
