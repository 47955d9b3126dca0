import 'reflect-metadata';
import { existsSync, readFileSync } from 'node:fs';
import { plainToInstance } from 'class-transformer';
import {
  getMetadataStorage,
  IsBoolean,
  IsIn,
  IsInt,
  IsNumber,
  IsObject,
  IsOptional,
  IsPositive,
  IsString,
  Max,
  Min,
  validateSync,
  type ValidationError,
} from 'class-validator';
import { parse as parseYaml } from 'yaml';
import { BACKEND_CHOICES } from '../core/engine.js';
import { UserError } from '../core/errors.js';
import { parseArgValue, type ArgValue } from '../methods/args.js';
import { getMethodClass, methodNames } from '../methods/registry.js';

/** How a flag's text becomes a value; `pairs`: repeatable `name=value`, collected into a map. */
export type FlagKind = 'number' | 'boolean' | 'string' | 'pairs';

/** One `ssl-train` flag, as `trainFlags()` gives it to the CLI. */
export interface FlagSpec {
  /** The config key it sets (camelCase). */
  key: keyof TrainConfig & string;
  /** The flag without `--`: the key in kebab-case unless the field says otherwise. */
  name: string;
  /** The value placeholder in the help: `<n>`, `<x>`, `<bool>`, ... */
  placeholder: string;
  description: string;
  kind: FlagKind;
}

interface FlagDeclaration {
  key: string;
  placeholder: string;
  description: string | (() => string);
  name?: string;
  kind?: FlagKind;
}

/** What `@Flag` recorded, in field order (the order of the help). */
const FLAG_DECLARATIONS: FlagDeclaration[] = [];

/**
 * Makes a config field a flag of `ssl-train` and `ssl-train verify`: its value placeholder and
 * help text. The default is the field's initialiser (none when it has none: then the text
 * says how the default is found); the parser follows the validators (`@IsInt`/`@IsNumber`:
 * a number, `@IsBoolean`: true/false, else the text), unless `kind` is given. A description
 * that lists what is registered at run time is a function, called when the help is built.
 */
function Flag(placeholder: string, description: string | (() => string), options: { name?: string; kind?: FlagKind } = {}): PropertyDecorator {
  return (_target, key) => {
    FLAG_DECLARATIONS.push({ key: String(key), placeholder, description, ...options });
  };
}

/**
 * Every option of `ssl-train` (train), the one place for its default and its flag. Names are
 * camelCase here, kebab-case as flags (`--batch-size`) and snake_case or camelCase in YAML
 * recipes (`batch_size`). Values come from, in increasing priority: the defaults below, the
 * method's recipe (optimizer, lr, weight decay), the `--config` file, then flags.
 */
export class TrainConfig {
  @Flag('<name>', () => `method: ${methodNames().join(', ')} or a registered subclass`) @IsString() method = 'simclr';
  @Flag('<name=value>', "method hyperparameter, repeatable (e.g. temperature=0.2); 'ssl-train methods' lists each method's with kind, default and range", {
    name: 'method-arg',
    kind: 'pairs',
  })
  @IsObject()
  methodArgs: Record<string, ArgValue> = {};
  @Flag('<name>', "backbone: resnet18, resnet50, tiny_resnet, mlp, vit_tiny, vit_small (default: the method's, tiny_resnet but vit_tiny for mae)")
  @IsString()
  backbone = 'tiny_resnet';
  @Flag('<n>', 'ViT patch side in pixels (vit_tiny, vit_small only; default 4: a 7 x 7 grid on 28 px images)')
  @IsOptional()
  @IsInt()
  @Min(1)
  patchSize?: number;
  @Flag('[bool]', 'ResNet 3x3 stride-1 stem, no max-pool (default: on for images <= 64 px)') @IsOptional() @IsBoolean() cifarStem?: boolean;
  @Flag('<name>', 'dataset: synthetic, fashion-mnist, cifar10, cifar100, or folder (your images in --data-dir)') @IsString() dataset = 'synthetic';
  @Flag('<dir>', 'dataset directory (fashion-mnist default: /usr/share/datasets/fashion-mnist; folder: DIR/<class>/*.{jpg,jpeg,png,webp})')
  @IsOptional()
  @IsString()
  dataDir?: string;
  /** Folder images are resized to cover S x S (aspect ratio kept), then centre cropped. */
  @Flag('<n>', 'image side in pixels: synthetic images (default 28); folder images are resized to cover it and centre cropped (default 64)')
  @IsOptional()
  @IsInt()
  @Min(8)
  @Max(256)
  imageSize?: number;
  @Flag('<dir>', 'folder: validation images in the same class subfolders (default: --val-fraction of --data-dir)') @IsOptional() @IsString() valDir?: string;
  @Flag('<x>', 'folder: fraction of each class held out for validation without --val-dir (seeded by --seed)') @IsNumber() @Min(0) @Max(0.9) valFraction = 0.1;
  @Flag('[bool]', 'folder: images without classes, flat or nested (kNN/linear validation off)') @IsBoolean() unlabelled = false;
  @Flag('<n>', 'folder: 1 (grayscale) or 3 (RGB) channels (default: 1 if every sampled image is grayscale, else 3)')
  @IsOptional()
  @IsInt()
  @IsIn([1, 3])
  channels?: number;
  @Flag('<n>', 'synthetic images: training set size') @IsInt() @Min(16) syntheticSize = 4096;

  @Flag('<n>', 'pre-train on a seeded sample of this many training images (0: all); the kNN memory still samples the whole set')
  @IsInt()
  @Min(0)
  trainSamples = 0;
  /** A string as a flag; in YAML the same string or a list of `{count, size, scale: [lo, hi]}` (see src/data/augment/crops.ts). */
  @Flag(
    '<NxS:lo-hi,...>',
    "crop groups: N crops of S x S px covering lo to hi of the image area, the first group global, the others local (multi-crop methods), e.g. 2x28:0.14-1,6x12:0.05-0.14 (default: the method's; 2 global crops of the image size and the recipe's scale)",
  )
  @IsOptional()
  crops?: string | Array<Record<string, unknown>>;
  @Flag('<n>', 'training epochs') @IsInt() @Min(1) epochs = 10;
  @Flag('<n>', 'stop after this many optimizer steps (smoke runs)') @IsOptional() @IsInt() @Min(1) maxSteps?: number;
  /** Each of W ranks gets batchSize / W. */
  @Flag('<n>', 'global batch size, split evenly over the ranks') @IsInt() @Min(2) batchSize = 256;
  @Flag('<name>', "sgd, lars or adamw (default: the method's recipe)") @IsOptional() @IsIn(['sgd', 'lars', 'adamw']) optimizer?: 'sgd' | 'lars' | 'adamw';
  /** The applied lr is lr * batchSize / 256. */
  @Flag('<x>', "base learning rate per 256 samples, scaled by batch/256 (default: the method's recipe)") @IsOptional() @IsNumber() @IsPositive() lr?: number;
  @Flag('<x>', 'online linear classifier lr per 256 samples (default: 0.1)') @IsOptional() @IsNumber() @IsPositive() classifierLr?: number;
  @Flag('<x>', "weight decay (default: the method's recipe)") @IsOptional() @IsNumber() @Min(0) weightDecay?: number;
  @Flag('<x>', 'SGD/LARS momentum') @IsNumber() @Min(0) @Max(1) momentum = 0.9;
  @Flag('<x>', 'LARS trust coefficient') @IsNumber() @IsPositive() larsEta = 0.02;
  @Flag('<bool>', 'LARS: clip the adaptive lr at the global lr') @IsBoolean() larsClipLr = true;
  @Flag('<x>', 'linear warmup epochs before the cosine decay (default: 10% of --epochs)') @IsOptional() @IsNumber() @Min(0) warmupEpochs?: number;
  @Flag('<x>', 'lr at the first warmup step') @IsNumber() @Min(0) warmupStartLr = 3e-5;
  @Flag('<x>', 'lr at the end of the cosine decay') @IsNumber() @Min(0) minLr = 0;
  @Flag('<x>', "weight decay at the last step of a cosine schedule from --weight-decay (DINO's; default: constant)")
  @IsOptional()
  @IsNumber()
  @Min(0)
  weightDecayEnd?: number;

  @Flag('<kind>', 'normalisation of backbone and heads: batch, group or layer') @IsIn(['batch', 'group', 'layer']) norm: 'batch' | 'group' | 'layer' = 'batch';
  @Flag('<n>', 'gradient cache: run the local batch in chunks of n samples (exact with --norm group|layer)')
  @IsOptional()
  @IsInt()
  @Min(1)
  gradCacheChunk?: number;
  @Flag('[bool]', 'allow the gradient cache with batch norm (per-chunk statistics: approximate)') @IsBoolean() gradCacheApproximateBn = false;
  @Flag('[bool]', 'recompute each transformer block in the backward pass instead of keeping its activations (ViT backbones, MAE decoder)')
  @IsBoolean()
  gradCheckpointing = false;
  @Flag('<n>', 'seed of every random draw (init, sampling, augmentation)') @IsInt() @Min(0) seed = 0;
  @Flag('<dir>', 'run directory (default: runs/<method>-<timestamp>)') @IsOptional() @IsString() runDir?: string;
  @Flag('<n>', 'save checkpoints/epoch-<n>.ckpt (and last.ckpt) every n epochs (0: only last.ckpt at the end)') @IsInt() @Min(0) checkpointEvery = 1;
  @Flag('<n>', 'also save checkpoints/last.ckpt every n optimizer steps, mid-epoch (0: off)') @IsInt() @Min(0) checkpointEverySteps = 0;
  @Flag('<path|auto>', 'continue from a checkpoint; auto: the newest valid one in <run-dir>/checkpoints, else start fresh')
  @IsOptional()
  @IsString()
  resume?: string;
  @Flag('[bool]', 'under Slurm: after a signal (SIGUSR1, SIGTERM, SIGINT) saved last.ckpt, requeue the job (scontrol requeue); run it with --resume auto')
  @IsBoolean()
  requeue = false;
  @Flag('[bool]', "take over the run directory's lock even when its holder may still run (another host, or a reused pid); see docs/training.md")
  @IsBoolean()
  forceUnlock = false;
  @Flag('<path>', 'start from the backbone of a run directory or checkpoint (heads fresh; the architecture must match)')
  @IsOptional()
  @IsString()
  pretrained?: string;
  @Flag('<name>', 'tensor backend: auto, cpu, cpu-js, tensorflow, webgpu') @IsIn([...BACKEND_CHOICES]) backend: (typeof BACKEND_CHOICES)[number] = 'auto';
  @Flag('<n>', 'processes (ranks) per node on CPU') @IsInt() @Min(1) devices = 1;
  @Flag('<n>', 'processes per node, one GPU adapter each (the WebGPU engine; or --backend tensorflow with tfjs-node-gpu)')
  @IsOptional()
  @IsInt()
  @Min(1)
  gpus?: number;
  @Flag('[bool]', 'let --gpus use software adapters (SwiftShader, llvmpipe), shared by the ranks when fewer than --gpus: for tests')
  @IsBoolean()
  allowSoftwareAdapter = false;
  @Flag('<n>', 'nodes (hosts) of the job') @IsInt() @Min(1) numNodes = 1;
  @Flag('<n>', 'index of this node') @IsInt() @Min(0) nodeRank = 0;
  @Flag('<url>', 'how ranks meet: file:///shared/dir, tcp://host:port, redis://host:port[/prefix] or env:// (default: a fresh file store)')
  @IsOptional()
  @IsString()
  rendezvous?: string;
  /** A registered strategy's name (src/trainer/strategy.ts: registerStrategy), checked when the run resolves it. */
  @Flag('<name>', 'auto, single, ddp or a strategy you registered (auto: ddp with more than one rank)') @IsString() strategy = 'auto';
  /** What makes W ranks equal one process. */
  @Flag('<bool>', 'batch norm with global-batch statistics across ranks (needed for exactness)') @IsBoolean() syncBatchnorm = true;
  @Flag('<x>', 'DDP gradient bucket size in MiB') @IsNumber() @IsPositive() bucketCapMb = 25;
  @Flag('<n>', 'batches per optimizer step (one gradient sync per step)') @IsInt() @Min(1) accumulateGradBatches = 1;
  @Flag('<bool>', 'drop the incomplete last global batch of an epoch (false: one process only)') @IsBoolean() dropLast = true;
  @Flag('<seconds>', 'how long a collective waits for the other ranks before failing') @IsNumber() @IsPositive() timeout = 300;
  @Flag('<n>', 'log training metrics every n steps') @IsInt() @Min(1) logEvery = 10;
  @Flag('<n>', 'validate (kNN, linear probe) every n epochs; 0 disables') @IsInt() @Min(0) valEvery = 1;
  @Flag('[bool]', 'also validate before the first step of a fresh run: the baseline of the initial weights') @IsBoolean() valAtStart = false;
  @Flag('<n>', 'kNN neighbours') @IsInt() @Min(1) knnK = 20;
  @Flag('<x>', 'kNN vote temperature') @IsNumber() @IsPositive() knnTemperature = 0.07;
  @Flag('<n>', 'training images in the kNN memory (0: all)') @IsInt() @Min(0) knnTrainSamples = 10000;
  @Flag('<n>', 'validation images to evaluate (0: all)') @IsInt() @Min(0) valSamples = 0;
  @Flag('<n>', 'augmentation worker threads (0: none)') @IsInt() @Min(0) @Max(64) workers = 1;
  /** Checked by `parseBadSamplesLimit` (src/data/bad-samples.ts). */
  @Flag('<n|p%>', 'unreadable training images skipped (with a warning each) before the run stops: a count, or a percentage of the training set')
  maxBadSamples: string | number = '1%';

  @Flag('<name>', 'local (the run directory) or wandb (Weights & Biases too; the run directory is always written)')
  @IsIn(['local', 'wandb'])
  logger: 'local' | 'wandb' = 'local';
  @Flag('<name>', 'W&B project, implies --logger wandb (default: WANDB_PROJECT, else ssl-zoo-<dataset>)') @IsOptional() @IsString() wandbProject?: string;
  @Flag('<name>', "W&B user or team (default: WANDB_ENTITY, else the API key's)") @IsOptional() @IsString() wandbEntity?: string;
  @Flag('<name>', 'W&B run name (default: <method>-<backbone>-<dataset>-seed<seed>)') @IsOptional() @IsString() wandbName?: string;
  @Flag('<name>', 'W&B group (default: <method>-<backbone>-<dataset>)') @IsOptional() @IsString() wandbGroup?: string;
  /** Comma-separated as a flag, or a YAML list. */
  @Flag('<a,b>', 'extra W&B tags (method, backbone and dataset always are)') @IsOptional() @IsString({ each: true }) wandbTags?: string | string[];
  @Flag('<mode>', 'online, offline (upload later: ssl-train wandb-sync RUN_DIR) or disabled (default: WANDB_MODE, else online)')
  @IsOptional()
  @IsIn(['online', 'offline', 'disabled'])
  wandbMode?: 'online' | 'offline' | 'disabled';
}

export type TrainConfigInput = Partial<Record<keyof TrainConfig, unknown>>;

/** The config keys (camelCase). */
export const CONFIG_KEYS = Object.keys(new TrainConfig());

/** The flags of the config fields, in the order of the help; descriptions are built now. */
export function trainFlags(): FlagSpec[] {
  const validators = getMetadataStorage().getTargetValidationMetadatas(TrainConfig, '', true, false);
  const has = (key: string, name: string) => validators.some((m) => m.propertyName === key && m.name === name);
  const inferKind = (key: string): FlagKind => (has(key, 'isInt') || has(key, 'isNumber') ? 'number' : has(key, 'isBoolean') ? 'boolean' : 'string');
  return FLAG_DECLARATIONS.map((d) => ({
    key: d.key as FlagSpec['key'],
    name: d.name ?? toKebab(d.key),
    placeholder: d.placeholder,
    description: typeof d.description === 'function' ? d.description() : d.description,
    kind: d.kind ?? inferKind(d.key),
  }));
}

/** `batch_size` or `batch-size` -> `batchSize`. */
export function toCamel(key: string): string {
  return key.replace(/[-_]([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

/** `batchSize` -> `batch-size` (the flag spelling, for messages). */
export function toKebab(key: string): string {
  return key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}

/**
 * Reads a YAML (or JSON) recipe into config keys. Keys may be snake_case or camelCase;
 * `method_args` (or `method_kwargs`, solo-learn's name) maps names to numbers, booleans or
 * choice words (checked against the method's declarations later). Unknown keys,
 * an unreadable file or bad YAML are user errors naming the file and the key.
 */
export function readConfigFile(path: string): TrainConfigInput {
  if (!existsSync(path)) throw new UserError(`config: file ${path} does not exist`);
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new UserError(`config: cannot read ${path}: ${(e as Error).message}`);
  }
  let data: unknown;
  try {
    data = parseYaml(text);
  } catch (e) {
    throw new UserError(`config: ${path} is not valid YAML: ${(e as Error).message.split('\n')[0]}`);
  }
  if (data === null || data === undefined) return {};
  if (typeof data !== 'object' || Array.isArray(data)) throw new UserError(`config: ${path} must contain a mapping of options`);
  const out: Record<string, unknown> = {};
  for (const [rawKey, value] of Object.entries(data as Record<string, unknown>)) {
    let key = toCamel(rawKey);
    if (key === 'methodKwargs') key = 'methodArgs';
    if (!CONFIG_KEYS.includes(key)) {
      throw new UserError(`config: unknown option '${rawKey}' in ${path}; see ssl-train --help for the options`);
    }
    out[key] = key === 'methodArgs' ? normalizeMethodArgs(value, path) : value;
  }
  return out as TrainConfigInput;
}

function normalizeMethodArgs(value: unknown, where: string): Record<string, ArgValue> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new UserError(`method_args: expected a mapping of name: value in ${where}`);
  }
  return Object.fromEntries(
    Object.entries(value as Record<string, unknown>).map(([k, v]) => {
      const ok = typeof v === 'boolean' || typeof v === 'string' || (typeof v === 'number' && Number.isFinite(v));
      if (!ok) throw new UserError(`method_args.${k}: ${JSON.stringify(v)} is not allowed; expected a number, true or false, or a word`);
      return [toCamel(k), v as ArgValue];
    }),
  );
}

/** Parses `name=value` (a `--method-arg`) into a pair: `true`/`false` booleans, numbers, choice words; user error otherwise. */
export function parseMethodArg(text: string): [string, ArgValue] {
  const match = /^([A-Za-z_][A-Za-z0-9_-]*)=(.+)$/.exec(text);
  const value = match ? parseArgValue(match[2]) : undefined;
  if (!match || value === undefined) {
    throw new UserError(
      `--method-arg: ${JSON.stringify(text)} is not allowed; expected name=value with a number, true or false, or a word, e.g. temperature=0.2, useBnInHead=true`,
    );
  }
  return [toCamel(match[1]), value];
}

const TYPE_WORDS: Record<string, string> = {
  isInt: 'an integer',
  isNumber: 'a number',
  isPositive: 'a number > 0',
  isBoolean: 'true or false',
  isString: 'a string',
  isObject: 'a mapping',
};

/** Config fields declared `@IsInt()`, to word bound errors ("an integer >= 1"). */
const INTEGER_FIELDS = new Set(
  getMetadataStorage()
    .getTargetValidationMetadatas(TrainConfig, '', true, false)
    .filter((m) => m.name === 'isInt')
    .map((m) => m.propertyName),
);

/** "--batch-size: "big" is not allowed; expected an integer >= 2". */
function describe(error: ValidationError): string {
  const constraints = error.constraints ?? {};
  const bound = (text: string | undefined) => /(-?[\d.e+-]+)\s*$/.exec(text ?? '')?.[1];
  const words: string[] = [];
  const type = ['isPositive', 'isInt', 'isNumber', 'isBoolean', 'isString', 'isObject'].find((c) => c in constraints);
  if (type) words.push(TYPE_WORDS[type]);
  else if (constraints.min || constraints.max) words.push(INTEGER_FIELDS.has(error.property) ? 'an integer' : 'a number');
  if (constraints.min) words.push(`>= ${bound(constraints.min)}`);
  if (constraints.max) words.push(`<= ${bound(constraints.max)}`);
  if (constraints.isIn) words.push(constraints.isIn.replace(/^.*one of the following values:\s*/, 'one of '));
  return `--${toKebab(error.property)}: ${JSON.stringify(error.value)} is not allowed; expected ${words.join(' ')}`;
}

/** Builds and validates a config; the first problem is a user error naming the field. */
export function buildConfig(input: TrainConfigInput): TrainConfig {
  const config = plainToInstance(TrainConfig, input as object, { exposeDefaultValues: true });
  const errors = validateSync(config, { forbidUnknownValues: true });
  if (errors.length > 0) throw new UserError(describe(errors[0]));
  if (input.backbone === undefined && methodNames().includes(config.method)) config.backbone = getMethodClass(config.method).defaultBackbone;
  return config;
}
