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

/**
 * Every option of `ssl-train` (train). Names are camelCase here, kebab-case as flags
 * (`--batch-size`) and snake_case or camelCase in YAML recipes (`batch_size`). Values come
 * from, in increasing priority: the defaults below, the method's recipe (optimizer, lr,
 * weight decay), the `--config` file, then flags.
 */
export class TrainConfig {
  @IsString() method = 'simclr';
  @IsString() backbone = 'tiny_resnet';
  @IsString() dataset = 'synthetic';
  @IsOptional() @IsString() dataDir?: string;
  /** Synthetic data only: image side and number of training images. */
  @IsInt() @Min(8) @Max(256) imageSize = 28;
  @IsInt() @Min(16) syntheticSize = 4096;
  /** CIFAR-style stem (3x3 stride-1 conv, no max-pool) for ResNets; default: on for images up to 64 px. */
  @IsOptional() @IsBoolean() cifarStem?: boolean;

  @IsInt() @Min(1) epochs = 10;
  @IsOptional() @IsInt() @Min(1) maxSteps?: number;
  /** Global batch N over all ranks; each of W ranks gets N / W. */
  @IsInt() @Min(2) batchSize = 256;
  /** Optimizer, lrs and weight decay default to the method's recipe. */
  @IsOptional() @IsIn(['sgd', 'lars', 'adamw']) optimizer?: 'sgd' | 'lars' | 'adamw';
  /** Base learning rate per 256 samples; the applied lr is lr * batchSize / 256. */
  @IsOptional() @IsNumber() @IsPositive() lr?: number;
  @IsOptional() @IsNumber() @IsPositive() classifierLr?: number;
  @IsOptional() @IsNumber() @Min(0) weightDecay?: number;
  @IsNumber() @Min(0) @Max(1) momentum = 0.9;
  @IsNumber() @IsPositive() larsEta = 0.02;
  @IsBoolean() larsClipLr = true;
  /** Default: 10% of the epochs. */
  @IsOptional() @IsNumber() @Min(0) warmupEpochs?: number;
  @IsNumber() @Min(0) warmupStartLr = 3e-5;
  @IsNumber() @Min(0) minLr = 0;
  @IsObject() methodArgs: Record<string, number> = {};

  /** Normalisation layers of the backbone and heads; `group`/`layer` make the gradient cache exact. */
  @IsIn(['batch', 'group', 'layer']) norm: 'batch' | 'group' | 'layer' = 'batch';
  /** Gradient cache: forward/backward the local batch in chunks of this many samples. */
  @IsOptional() @IsInt() @Min(1) gradCacheChunk?: number;
  /** Accept per-chunk batch-norm statistics with the gradient cache (approximate). */
  @IsBoolean() gradCacheApproximateBn = false;
  @IsInt() @Min(0) seed = 0;
  @IsOptional() @IsString() runDir?: string;
  @IsInt() @Min(0) checkpointEvery = 1;
  /** Also write `checkpoints/last.ckpt` every this many optimizer steps, mid-epoch included (0: off). */
  @IsInt() @Min(0) checkpointEverySteps = 0;
  @IsOptional() @IsString() resume?: string;
  @IsIn([...BACKEND_CHOICES]) backend: (typeof BACKEND_CHOICES)[number] = 'auto';
  /** Processes (ranks) per node on CPU. */
  @IsInt() @Min(1) devices = 1;
  /** Processes per node, one GPU each (needs the tensorflow GPU backend). */
  @IsOptional() @IsInt() @Min(1) gpus?: number;
  @IsInt() @Min(1) numNodes = 1;
  @IsInt() @Min(0) nodeRank = 0;
  /** Rendezvous of the ranks: file:///shared/dir, tcp://host:port, redis://host:port (default: a fresh file store). */
  @IsOptional() @IsString() rendezvous?: string;
  /** `auto`: ddp when there is more than one rank. */
  @IsIn(['auto', 'single', 'ddp']) strategy: 'auto' | 'single' | 'ddp' = 'auto';
  /** Global-batch batch norm across ranks: what makes W ranks equal one process. */
  @IsBoolean() syncBatchnorm = true;
  @IsNumber() @IsPositive() bucketCapMb = 25;
  @IsInt() @Min(1) accumulateGradBatches = 1;
  /** Drop the last incomplete global batch of each epoch (false: a short last batch; one process only). */
  @IsBoolean() dropLast = true;
  /** Seconds a collective may wait for the other ranks before failing. */
  @IsNumber() @IsPositive() timeout = 300;
  @IsInt() @Min(1) logEvery = 10;
  @IsInt() @Min(0) valEvery = 1;
  @IsInt() @Min(1) knnK = 20;
  @IsNumber() @IsPositive() knnTemperature = 0.07;
  /** Training images whose features form the kNN memory (0 = all). */
  @IsInt() @Min(0) knnTrainSamples = 10000;
  /** Validation images used for kNN and linear accuracy (0 = all). */
  @IsInt() @Min(0) valSamples = 0;
  /** Augmentation worker threads (0 = on the training thread). */
  @IsInt() @Min(0) @Max(64) workers = 1;

  /** `wandb`: mirror the run to Weights & Biases too (the run directory is always written). */
  @IsIn(['local', 'wandb']) logger: 'local' | 'wandb' = 'local';
  /** W&B project (implies `logger: wandb`); default WANDB_PROJECT, else `ssl-zoo-<dataset>`. */
  @IsOptional() @IsString() wandbProject?: string;
  /** W&B user or team; default WANDB_ENTITY, else the API key's default entity. */
  @IsOptional() @IsString() wandbEntity?: string;
  /** W&B run name; default `<method>-<backbone>-<dataset>-seed<seed>`. */
  @IsOptional() @IsString() wandbName?: string;
  /** W&B group; default `<method>-<backbone>-<dataset>`. */
  @IsOptional() @IsString() wandbGroup?: string;
  /** Extra W&B tags, comma-separated (or a YAML list); method, backbone and dataset are always tags. */
  @IsOptional() @IsString({ each: true }) wandbTags?: string | string[];
  /** `offline`: local only, upload later with `ssl-train wandb-sync`; default WANDB_MODE, else online. */
  @IsOptional() @IsIn(['online', 'offline', 'disabled']) wandbMode?: 'online' | 'offline' | 'disabled';
}

export type TrainConfigInput = Partial<Record<keyof TrainConfig, unknown>>;

/** The config keys (camelCase). */
export const CONFIG_KEYS = Object.keys(new TrainConfig());

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
 * `method_args` (or `method_kwargs`, solo-learn's name) is a map of numbers. Unknown keys,
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

function normalizeMethodArgs(value: unknown, where: string): Record<string, number> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new UserError(`method_args: expected a mapping of name: number in ${where}`);
  }
  return Object.fromEntries(
    Object.entries(value as Record<string, unknown>).map(([k, v]) => {
      if (typeof v !== 'number' || !Number.isFinite(v)) throw new UserError(`method_args.${k}: ${JSON.stringify(v)} is not allowed; expected a number`);
      return [toCamel(k), v];
    }),
  );
}

/** Parses `name=value` (a `--method-arg`) into a pair; user error otherwise. */
export function parseMethodArg(text: string): [string, number] {
  const match = /^([A-Za-z_][A-Za-z0-9_-]*)=(.+)$/.exec(text);
  const value = match ? Number(match[2]) : NaN;
  if (!match || !Number.isFinite(value)) {
    throw new UserError(`--method-arg: ${JSON.stringify(text)} is not allowed; expected name=number, e.g. temperature=0.2`);
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
  return config;
}
