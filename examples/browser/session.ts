/**
 * A training run of the browser page (examples/browser): a method on in-memory images, one
 * optimizer step at a time, as `ssl-train` trains a `--dataset folder` run on one process
 * (the same method, recipe, views, sampler, schedule and progress counters), so that its
 * checkpoint (`SSLZCKP1`, the trainer's format and metadata) continues in Node with
 * `ssl-train --resume` and a Node checkpoint continues here.
 *
 * The library is a parameter (the page passes the browser bundle, Node tests the library's
 * modules): this module imports nothing at run time and is served to the page as is.
 */
import type * as Zoo from '../../src/browser.js';

type Library = typeof Zoo;

/** What the user chose: the `ssl-train` flags of the same run. */
export interface RunSettings {
  method: string;
  backbone: string;
  /** Side of the (square) training images, in pixels. */
  imageSize: number;
  batchSize: number;
  epochs: number;
  seed: number;
  /** Method hyperparameters (`--method-arg`); the method's defaults for the rest. */
  methodArgs?: Record<string, Zoo.ArgValue>;
  /** ViT patch side (`--patch-size`). */
  patchSize?: number;
  /** Base learning rate per 256 samples (`--lr`; default: the method's recipe). */
  lr?: number;
}

/** Decoded images: `[length, size, size, channels]` bytes, 0..255, with their classes. */
export interface PixelImages {
  pixels: Uint8Array;
  length: number;
  size: number;
  channels: 1 | 3;
  labels: Int32Array;
  /** One name per class (`['unlabelled']` for a folder without class sub-folders). */
  classNames: string[];
}

/** One optimizer step's outcome. */
export interface StepResult {
  /** Steps done after it. */
  step: number;
  epoch: number;
  loss: number;
  /** Images per second of the step (its views included once). */
  imagesPerSecond: number;
}

/** The trainer's progress counters (checkpoint metadata `progress`). */
interface Counters {
  epoch: number;
  step: number;
  batchInEpoch: number;
  totalSteps: number;
}

/** A run of {@link RunSettings} on {@link PixelImages}. */
export class TrainingSession {
  readonly totalSteps: number;
  readonly stepsPerEpoch: number;
  private readonly progress: Counters;
  private readonly strategy: Zoo.SingleDeviceStrategy;
  private readonly sampler: { indices(epoch: number): Int32Array };
  private readonly views: Zoo.ViewAugmentation[];
  private readonly optimizer: Zoo.TrainerOptimizer;
  private readonly sequence: Zoo.StepSequence<Zoo.MultiViewBatch>;
  private readonly config: Record<string, unknown>;
  private wallTimeSec = 0;

  private constructor(
    private readonly zoo: Library,
    readonly settings: RunSettings,
    readonly dataset: Zoo.ImageDataset,
    readonly method: Zoo.BaseMethod,
  ) {
    const methodClass = zoo.getMethodClass(settings.method);
    const defaults = methodClass.optimDefaults;
    if (settings.batchSize > dataset.length) {
      throw new zoo.UserError(`batch size ${settings.batchSize} is larger than the ${dataset.length} images picked`);
    }
    this.stepsPerEpoch = Math.floor(dataset.length / settings.batchSize);
    this.totalSteps = settings.epochs * this.stepsPerEpoch;
    const optim = {
      optimizer: defaults.optimizer,
      lr: settings.lr ?? defaults.lr,
      classifierLr: defaults.classifierLr,
      weightDecay: defaults.weightDecay,
      ...{ momentum: 0.9, larsEta: 0.02, larsClipLr: true, warmupEpochs: settings.epochs / 10, warmupStartLr: 3e-5, minLr: 0 },
    };
    const task = new zoo.SslTask(method, { ...optim, globalBatch: settings.batchSize });
    this.strategy = new zoo.SingleDeviceStrategy();
    task.setup({ group: this.strategy.group });
    const { optimizer, scheduler } = task.configureOptimizers({ totalSteps: this.totalSteps, stepsPerEpoch: this.stepsPerEpoch });
    this.optimizer = optimizer;
    this.sequence = new zoo.StepSequence({ module: task, strategy: this.strategy, optimizer, scheduler, variables: method.trainableParameters() });
    this.sampler = this.strategy.sampler({ length: dataset.length, seed: settings.seed, localBatch: settings.batchSize, dropLast: true });
    this.views = zoo.resolveCrops(undefined, methodClass.crops, settings.method, zoo.viewsFor(methodClass.viewRecipe, dataset), settings.imageSize).views;
    this.progress = { epoch: 0, step: 0, batchInEpoch: 0, totalSteps: this.totalSteps };
    this.config = {
      ...{ method: settings.method, backbone: settings.backbone, methodArgs: zoo.resolveMethodArgs(settings.method, settings.methodArgs ?? {}) },
      ...{ dataset: 'folder', imageSize: settings.imageSize, channels: dataset.channels, batchSize: settings.batchSize, epochs: settings.epochs },
      ...{ seed: settings.seed, dropLast: true, cifarStem: settings.imageSize <= 64, norm: 'batch', ...optim },
      ...(settings.patchSize !== undefined ? { patchSize: settings.patchSize } : {}),
      unlabelled: dataset.classNames.length === 1 && dataset.classNames[0] === 'unlabelled',
      trainSize: dataset.length,
      backendInUse: zoo.engineInfo()?.backend,
      createdBy: 'ssl-zoo browser page',
    };
  }

  /** A fresh run: the method's weights from `settings.seed`, as `ssl-train` initialises them. */
  static create(zoo: Library, settings: RunSettings, images: PixelImages): TrainingSession {
    const dataset = zoo.createDataset({
      ...{ name: 'folder', length: images.length, height: images.size, width: images.size, channels: images.channels },
      ...{ numClasses: images.classNames.length, classNames: images.classNames, labels: images.labels, pixels: images.pixels },
    });
    const methodClass = zoo.getMethodClass(settings.method);
    const method = new methodClass({
      createBackbone: (rng) =>
        zoo.createBackbone(settings.backbone, {
          ...{ inChannels: images.channels, imageSize: images.size, cifarStem: images.size <= 64, rng, norm: 'batch' },
          patchSize: settings.patchSize,
        }),
      numClasses: dataset.numClasses,
      datasetSize: dataset.length,
      rng: new zoo.Rng(settings.seed),
      args: zoo.resolveMethodArgs(settings.method, settings.methodArgs ?? {}),
      norm: 'batch',
    });
    return new TrainingSession(zoo, settings, dataset, method);
  }

  /**
   * The run of checkpoint bytes (the page's or a Node `last.ckpt`), continued on `images`: the
   * settings come from the checkpoint's `config`, the weights, optimizer state and progress
   * from its tensors and `progress`.
   */
  static async resume(zoo: Library, bytes: Uint8Array, images: PixelImages): Promise<TrainingSession> {
    let data: Zoo.CheckpointData;
    try {
      data = await zoo.decodeCheckpoint(bytes, zoo.webCryptoSha256);
    } catch (e) {
      if (e instanceof zoo.CheckpointProblem) throw new zoo.UserError(`the checkpoint ${e.message}`);
      throw e;
    }
    try {
      const session = TrainingSession.create(zoo, settingsOf(zoo, data.meta, images), images);
      session.restore(data);
      return session;
    } finally {
      zoo.tf.dispose(Object.values(data.tensors));
    }
  }

  /** Optimizer steps done. */
  get step(): number {
    return this.progress.step;
  }

  get epoch(): number {
    return this.progress.epoch;
  }

  get finished(): boolean {
    return this.progress.step >= this.totalSteps;
  }

  /** One optimizer step on the next batch of the epoch (its views augmented here, on this thread). */
  async trainStep(): Promise<StepResult> {
    const started = performance.now();
    const { batchSize, seed } = this.settings;
    const p = this.progress;
    const indices = this.sampler.indices(p.epoch).slice(p.batchInEpoch * batchSize, (p.batchInEpoch + 1) * batchSize);
    const { views, crops } = this.zoo.augmentBatch(this.dataset, this.views, seed, p.epoch, indices);
    const c = this.dataset.channels;
    const shapes = this.views.map((v) => [batchSize, v.cropSize, v.cropSize, c] as [number, number, number, number]);
    const labels = Int32Array.from(indices, (i) => this.dataset.labels[i]);
    const batch = { views, crops, shape: shapes[0], shapes, labels, indices, index: p.batchInEpoch, epoch: p.epoch, seed };
    this.sequence.addBatch(batch, p);
    const { metrics } = await this.sequence.finishStep(p);
    let loss: number;
    try {
      loss = (await this.zoo.readMetrics([metrics], this.strategy))[0].local.loss;
    } finally {
      this.zoo.tf.dispose(Object.values(metrics.tensors));
    }
    const epoch = p.epoch;
    if (p.batchInEpoch >= this.stepsPerEpoch) {
      p.epoch++;
      p.batchInEpoch = 0;
    }
    const seconds = (performance.now() - started) / 1000;
    this.wallTimeSec += seconds;
    return { step: p.step, epoch, loss, imagesPerSecond: batchSize / Math.max(seconds, 1e-9) };
  }

  /** The run as checkpoint bytes: the trainer's tensors (`model/`, `optimizer/`) and metadata. */
  async checkpoint(): Promise<Uint8Array> {
    const optim = this.optimizer.stateDict();
    const model = this.method.stateDict();
    const tensors = {
      ...Object.fromEntries(Object.entries(model).map(([name, t]) => [`model/${name}`, t])),
      ...Object.fromEntries(Object.entries(optim.tensors).map(([name, t]) => [`optimizer/${name}`, t])),
    };
    const { epoch, step, batchInEpoch } = this.progress;
    const parts = await this.zoo.encodeCheckpoint(
      {
        tensors,
        meta: {
          format: 'ssl-zoo-checkpoint/1',
          progress: { epoch, step, batchInEpoch },
          optimizer: optim.meta,
          rng: { seed: this.settings.seed, keyed: '(seed, epoch, index, view)' },
          wallTimeSec: this.wallTimeSec,
          config: this.config,
        },
      },
      this.zoo.webCryptoSha256,
    );
    return this.zoo.joinBytes(parts);
  }

  /** The `ssl-train` command line that continues this run from its checkpoint at `checkpointPath` on the same folder `dataDir`. */
  nodeCommand(checkpointPath: string, dataDir: string): string {
    const s = this.settings;
    const args = Object.entries(s.methodArgs ?? {}).map(([name, value]) => `--method-arg ${name}=${String(value)}`);
    // Every image trains, as in the page: a labelled folder is its own (unused) validation set.
    const data = this.config.unlabelled ? `${dataDir} --unlabelled` : `${dataDir} --val-dir ${dataDir}`;
    return (
      `ssl-train --method ${s.method} --backbone ${s.backbone} --dataset folder --data-dir ${data} --val-every 0 ` +
      `--image-size ${s.imageSize} --channels ${this.dataset.channels} --batch-size ${s.batchSize} --epochs ${s.epochs} --seed ${s.seed}` +
      `${s.patchSize !== undefined ? ` --patch-size ${s.patchSize}` : ''}${s.lr !== undefined ? ` --lr ${s.lr}` : ''}${args.length > 0 ? ` ${args.join(' ')}` : ''} --resume ${checkpointPath}`
    );
  }

  /**
   * The backbone as `ssl-train export --format tfjs` writes it: `model.json`, the weight
   * shard and `ssl-zoo.json`, by name (the eval view's normalisation inside the model; batch
   * norm in inference mode). The backbone is back in training mode afterwards. Its weights
   * and buffers are read asynchronously first: the export reads them synchronously, and
   * tfjs's WebGPU backend then answers from what the asynchronous read brought to the host
   * (a page's synchronous read of a GPU tensor goes through a canvas, which headless
   * Chromium on SwiftShader gets wrong: zeros).
   */
  async exportTfjs(): Promise<Array<[string, Uint8Array | string]>> {
    await Promise.all(Object.values(this.method.backbone.stateDict()).map((v) => v.data()));
    const { mean, std } = this.zoo.evalTransform(this.dataset);
    this.method.backbone.eval();
    try {
      const { settings: s, dataset } = this;
      return this.zoo.tfjsExportFiles({
        ...{ backbone: this.method.backbone, name: s.backbone, inChannels: dataset.channels, imageSize: dataset.height },
        ...{ cifarStem: dataset.height <= 64, norm: 'batch', mean, std, sslZooVersion: 'browser page' },
        source: { runDir: 'browser page', method: s.method, dataset: 'folder', checkpoint: 'IndexedDB', step: this.progress.step },
      }).files;
    } finally {
      this.method.backbone.train();
    }
  }

  /**
   * The backbone's eval-mode features of dataset rows `rows` (`[rows.length, dim]`, row-major),
   * as `ssl-train embed` computes them: the full image, the eval view's normalisation, batch
   * norm in inference mode, 64 images at a time. The backbone is back in training mode afterwards.
   * Reads the device asynchronously (tfjs's synchronous WebGPU read in a page is a slow detour
   * through a canvas).
   */
  async features(rows: ArrayLike<number>): Promise<{ values: Float32Array; dim: number }> {
    const { tf } = this.zoo;
    const { mean, std } = this.zoo.evalTransform(this.dataset);
    const { height: s, channels: c, pixels } = this.dataset;
    const image = s * s * c;
    const chunks: Float32Array[] = [];
    this.method.backbone.eval();
    try {
      for (let start = 0; start < rows.length; start += 64) {
        const count = Math.min(64, rows.length - start);
        const batch = new Float32Array(count * image);
        for (let k = 0; k < count; k++) {
          const offset = rows[start + k] * image;
          for (let j = 0; j < image; j++) batch[k * image + j] = pixels[offset + j] / 255;
        }
        const features = tf.tidy(() => {
          const x = tf.div(tf.sub(tf.tensor4d(batch, [count, s, s, c]), tf.tensor1d(mean)), tf.tensor1d(std));
          return this.method.backbone.forward(x);
        });
        try {
          chunks.push((await features.data()) as Float32Array);
        } finally {
          features.dispose();
        }
      }
    } finally {
      this.method.backbone.train();
    }
    const dim = this.method.backbone.featureDim;
    const values = new Float32Array(rows.length * dim);
    let at = 0;
    for (const chunk of chunks) {
      values.set(chunk, at);
      at += chunk.length;
    }
    return { values, dim };
  }

  dispose(): void {
    this.optimizer.dispose();
    this.method.dispose();
  }

  private restore(data: Zoo.CheckpointData): void {
    const strip = (prefix: string) =>
      Object.fromEntries(
        Object.entries(data.tensors)
          .filter(([name]) => name.startsWith(prefix))
          .map(([name, t]) => [name.slice(prefix.length), t]),
      );
    this.method.loadStateDict(strip('model/'));
    this.optimizer.loadStateDict({ tensors: strip('optimizer/'), meta: data.meta.optimizer });
    const saved = data.meta.progress as { epoch: number; step: number; batchInEpoch: number } | undefined;
    if (!saved || !Number.isInteger(saved.step)) throw new this.zoo.UserError('the checkpoint records no training progress (not a trainer checkpoint)');
    this.progress.epoch = saved.epoch;
    this.progress.step = saved.step;
    this.progress.batchInEpoch = saved.batchInEpoch;
    this.wallTimeSec = typeof data.meta.wallTimeSec === 'number' ? data.meta.wallTimeSec : 0;
  }
}

/** The settings a checkpoint's `config` records, checked against the images they continue on. */
function settingsOf(zoo: Library, meta: Record<string, unknown>, images: PixelImages): RunSettings {
  const config = (meta.config ?? {}) as Record<string, unknown>;
  const need = (key: string, kind: 'string' | 'number') => {
    const value = config[key];
    if (typeof value !== kind) throw new zoo.UserError(`the checkpoint's config has no ${key}; it was not written by ssl-train or this page`);
    return value as never;
  };
  const imageSize: number = need('imageSize', 'number');
  if (imageSize !== images.size)
    throw new zoo.UserError(`the checkpoint was trained on ${imageSize} px images; the page decoded the folder at ${images.size} px`);
  if (config.channels !== undefined && config.channels !== images.channels) {
    throw new zoo.UserError(`the checkpoint was trained on ${String(config.channels)}-channel images, these have ${images.channels}`);
  }
  return {
    ...{ method: need('method', 'string'), backbone: need('backbone', 'string'), imageSize, batchSize: need('batchSize', 'number') },
    ...{ epochs: need('epochs', 'number'), seed: need('seed', 'number'), methodArgs: (config.methodArgs ?? {}) as Record<string, Zoo.ArgValue> },
    ...(typeof config.patchSize === 'number' ? { patchSize: config.patchSize } : {}),
    ...(typeof config.lr === 'number' ? { lr: config.lr } : {}),
  };
}
