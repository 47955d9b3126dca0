/**
 * Image folders as datasets (`--dataset folder`): torchvision's ImageFolder layout
 * `DIR/<class>/**\/*.{jpg,jpeg,png,webp}` with classes from the sorted subfolder names, or
 * any flat or nested folder without classes (`unlabelled`). Only the file list is kept; the
 * images are decoded per batch (src/data/pixels.ts). A seeded sample of the images decides
 * the channel count (unless given) and the normalisation constants.
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import { extname, resolve, sep } from 'node:path';
import sharp from 'sharp';
import { atPath, UserError } from '../core/errors.js';
import { Rng } from '../core/random.js';
import type { ChannelStats, FolderDataset } from './dataset.js';
import { decodeImage } from './pixels.js';

/** The file name endings read as images (any case). */
export const IMAGE_EXTENSIONS = ['.jpg', '.jpeg', '.png', '.webp'] as const;

/** Images sampled to choose the channel count and estimate the normalisation. */
const STATS_SAMPLE = 256;

export interface ImageFolderOptions {
  /** The training folder. */
  dir: string;
  /** A validation folder with (a subset of) the same class subfolders. */
  valDir?: string;
  /** Without `valDir`: the fraction of each class held out for validation (seeded, stratified). */
  valFraction: number;
  /** A folder without classes: no labels, no validation split. */
  unlabelled: boolean;
  /** Images are resized to cover imageSize x imageSize and centre cropped. */
  imageSize: number;
  /** 1 or 3; default 1 if every sampled image is grayscale, else 3. */
  channels?: number;
  /** Seed of the validation split and of the statistics sample. */
  seed: number;
  /** Called once per file that is not an image by its name, or lies outside the class folders (once the folder is found usable). */
  onSkip?: (path: string, reason: string) => void;
}

/** A folder's training and validation datasets (`val` undefined when unlabelled). */
export interface ImageFolderSplits {
  train: FolderDataset;
  val: FolderDataset | undefined;
  /** Files skipped by name while listing. */
  skippedFiles: number;
}

const isImage = (name: string): boolean => (IMAGE_EXTENSIONS as readonly string[]).includes(extname(name).toLowerCase());

/** Every file under `dir` (recursively, following symlinks to files), sorted; `what` names the folder in messages. */
function listFiles(dir: string, what: string): string[] {
  if (!existsSync(dir)) throw new UserError(`${what}: folder ${dir} does not exist`);
  if (!statSync(dir).isDirectory()) throw new UserError(`${what}: ${dir} is not a folder`);
  const files: string[] = [];
  // One directory's entries at a time (readdir's recursive mode holds every entry at once),
  // and no path.join per file: listing 60k files stays fast and small.
  const walk = (d: string): void => {
    // A folder the user gave that cannot be listed is a bad input (exit code 2), named.
    for (const e of atPath(d, 'listing', () => readdirSync(d, { withFileTypes: true }), 2)) {
      const path = `${d}${sep}${e.name}`;
      if (e.isDirectory()) walk(path);
      else if (e.isFile() || (e.isSymbolicLink() && statSync(path, { throwIfNoEntry: false })?.isFile())) files.push(path);
    }
  };
  walk(dir);
  return files.sort();
}

/** Images of a folder ([files], and the class folder of each) and the other files with the reason they are skipped. */
function scanFolder(dir: string, what: string, unlabelled: boolean) {
  const root = resolve(dir);
  const all = listFiles(root, what);
  const files: string[] = [];
  const classOf: string[] = [];
  const skipped: [string, string][] = [];
  for (const path of all) {
    const parts = path.slice(root.length + 1).split(sep);
    const reason = !isImage(path) ? `not an image (${IMAGE_EXTENSIONS.join(', ')})` : !unlabelled && parts.length < 2 ? 'not in a class folder' : undefined;
    if (reason) {
      skipped.push([path, reason]);
      continue;
    }
    files.push(path);
    classOf.push(unlabelled ? '' : parts[0]);
  }
  if (files.length === 0) {
    const others =
      skipped.length > 0
        ? `; its ${skipped.length} files are not images (${IMAGE_EXTENSIONS.join(', ')}) or not in class subfolders (DIR/<class>/; --unlabelled reads any layout)`
        : '';
    throw new UserError(`${what}: no images in ${dir}${others}`);
  }
  return { files, classOf, skipped };
}

/** Indices of each class's held-out files: round(fraction * n_c) of them, at most n_c - 1, seeded. */
function stratifiedSplit(labels: Int32Array, numClasses: number, fraction: number, seed: number): boolean[] {
  const held = new Array<boolean>(labels.length).fill(false);
  for (let c = 0; c < numClasses; c++) {
    const members = [];
    for (let i = 0; i < labels.length; i++) if (labels[i] === c) members.push(i);
    const take = Math.min(Math.round(fraction * members.length), members.length - 1);
    const order = Rng.keyed(seed, 0x5a11d, c).permutation(members.length);
    for (let k = 0; k < take; k++) held[members[order[k]]] = true;
  }
  return held;
}

function makeDataset(
  files: string[],
  labels: Int32Array,
  classNames: string[],
  options: ImageFolderOptions,
  channels: number,
  stats: ChannelStats,
): FolderDataset {
  return Object.freeze({
    name: 'folder',
    length: files.length,
    height: options.imageSize,
    width: options.imageSize,
    channels,
    numClasses: classNames.length,
    classNames: Object.freeze([...classNames]),
    labels,
    files: Object.freeze(files),
    stats,
    labelled: !options.unlabelled,
  });
}

/** Whether the image at `path` has colour (sharp metadata: its header only). */
async function hasColour(path: string): Promise<boolean> {
  const m = await sharp(path).metadata();
  return !(m.space === 'b-w' || m.space === 'grey16') && (m.channels ?? 3) - (m.hasAlpha ? 1 : 0) >= 3;
}

/**
 * Channel count (given, or 1 when every readable sampled image is grayscale) and the
 * per-channel mean/std of the sampled images as decoded. A user error when none of them decodes.
 */
async function sampleStats(files: string[], options: ImageFolderOptions): Promise<{ channels: number; stats: ChannelStats }> {
  const order = Rng.keyed(options.seed, 0x57a7).permutation(files.length);
  const sample = Array.from(order.subarray(0, Math.min(STATS_SAMPLE, files.length)), (i) => files[i]);
  const colour = await Promise.all(sample.map((f) => hasColour(f).catch(() => undefined)));
  const channels = options.channels ?? (colour.some((c) => c === true) ? 3 : 1);
  const sum = new Float64Array(channels);
  const sumSq = new Float64Array(channels);
  let count = 0;
  // each image, or why it did not decode
  const decoded = await Promise.all(
    sample.map((path) => decodeImage(path, options.imageSize, options.imageSize, channels).catch((e: Error) => `${path}: ${e.message.split('\n')[0]}`)),
  );
  for (const image of decoded) {
    if (typeof image === 'string') continue;
    for (let i = 0; i < image.length; i++) {
      sum[i % channels] += image[i];
      sumSq[i % channels] += image[i] * image[i];
    }
    count += image.length / channels;
  }
  if (count === 0)
    throw new UserError(
      `--data-dir: none of the ${sample.length} sampled images of ${options.dir} could be decoded (${decoded.find((d) => typeof d === 'string')})`,
    );
  const mean = Array.from(sum, (s) => s / count);
  const std = Array.from(sumSq, (s, k) => Math.sqrt(Math.max(s / count - mean[k] * mean[k], 0)) / 255 || 1);
  return { channels, stats: { mean: mean.map((m) => m / 255), std } };
}

/**
 * Lists an image folder and, unless unlabelled, its validation split (`valDir`, else a
 * seeded stratified `valFraction` of every class). User errors: a missing or empty folder, no
 * images, one class only, images outside class folders only, validation classes unknown to
 * the training folder, no image decodable in the statistics sample.
 */
export async function loadImageFolder(options: ImageFolderOptions): Promise<ImageFolderSplits> {
  const scan = scanFolder(options.dir, '--data-dir', options.unlabelled);
  const skipped = [...scan.skipped];
  const report = (): number => {
    for (const [path, reason] of skipped) options.onSkip?.(path, reason);
    return skipped.length;
  };
  if (options.unlabelled) {
    const { channels, stats } = await sampleStats(scan.files, options);
    const train = makeDataset(scan.files, new Int32Array(scan.files.length), ['unlabelled'], options, channels, stats);
    return { train, val: undefined, skippedFiles: report() };
  }
  const classNames = [...new Set(scan.classOf)].sort();
  if (classNames.length < 2) {
    throw new UserError(
      `--data-dir: ${options.dir} has images of one class only ('${classNames[0]}'); --dataset folder needs at least 2 class subfolders, or --unlabelled`,
    );
  }
  const classIndex = new Map(classNames.map((c, k) => [c, k]));
  const labels = Int32Array.from(scan.classOf, (c) => classIndex.get(c)!);
  let trainIdx: number[];
  let valFiles: string[];
  let valLabels: Int32Array;
  if (options.valDir !== undefined) {
    const val = scanFolder(options.valDir, '--val-dir', false);
    skipped.push(...val.skipped);
    const unknown = [...new Set(val.classOf)].filter((c) => !classIndex.has(c));
    if (unknown.length > 0) throw new UserError(`--val-dir: class folders ${unknown.join(', ')} of ${options.valDir} are not classes of ${options.dir}`);
    trainIdx = scan.files.map((_, i) => i);
    valFiles = val.files;
    valLabels = Int32Array.from(val.classOf, (c) => classIndex.get(c)!);
  } else {
    const held = stratifiedSplit(labels, classNames.length, options.valFraction, options.seed);
    trainIdx = scan.files.flatMap((_, i) => (held[i] ? [] : [i]));
    const valIdx = scan.files.flatMap((_, i) => (held[i] ? [i] : []));
    if (valIdx.length === 0)
      throw new UserError(`--val-fraction: ${options.valFraction} holds out no image of ${options.dir}; give a larger fraction or --val-dir`);
    valFiles = valIdx.map((i) => scan.files[i]);
    valLabels = Int32Array.from(valIdx, (i) => labels[i]);
  }
  const trainFiles = trainIdx.map((i) => scan.files[i]);
  const { channels, stats } = await sampleStats(trainFiles, options);
  return {
    train: makeDataset(
      trainFiles,
      Int32Array.from(trainIdx, (i) => labels[i]),
      classNames,
      options,
      channels,
      stats,
    ),
    val: makeDataset(valFiles, valLabels, classNames, options, channels, stats),
    skippedFiles: report(),
  };
}
