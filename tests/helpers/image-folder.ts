import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import { Rng } from '../../src/core/random.js';
import { createDataset, subset, type ImageDataset } from '../../src/data/dataset.js';

/**
 * Writes the first `perClass` images of each of the first `classes` classes of `ds` as
 * lossless PNG files `dir/<class name>/<index>.png` (1-channel datasets as grayscale PNGs).
 * Returns the dataset indices written, in the order an ImageFolder listing sorts them.
 */
export async function writePngFolder(ds: ImageDataset, dir: string, perClass: number, classes = ds.numClasses): Promise<number[]> {
  const bytes = ds.height * ds.width * ds.channels;
  const byClass = new Map<number, number[]>();
  for (let i = 0; i < ds.length; i++) {
    const c = ds.labels[i];
    if (c >= classes) continue;
    const list = byClass.get(c) ?? [];
    if (list.length < perClass) list.push(i);
    byClass.set(c, list);
  }
  const written: [string, number][] = [];
  for (const [c, list] of byClass) {
    const name = ds.classNames[c].replace(/[^A-Za-z0-9-]/g, '_');
    mkdirSync(join(dir, name), { recursive: true });
    for (const i of list) {
      const path = join(dir, name, `${String(i).padStart(5, '0')}.png`);
      const raw = sharp(Buffer.from(ds.pixels.subarray(i * bytes, (i + 1) * bytes)), {
        raw: { width: ds.width, height: ds.height, channels: ds.channels as 1 | 3 },
      });
      await (ds.channels === 1 ? raw.toColourspace('b-w') : raw).png().toFile(path);
      written.push([path, i]);
    }
  }
  return written.sort((a, b) => (a[0] < b[0] ? -1 : 1)).map(([, i]) => i);
}

/**
 * {@link writePngFolder}, and the images written as an in-memory dataset in the folder's
 * order with its labels (class index = rank of the sorted folder names) and class names.
 * Named `png-copy`, so that its normalisation is computed from its pixels as a folder's is.
 */
export async function writePngFolderCopy(ds: ImageDataset, dir: string, perClass: number, classes = ds.numClasses): Promise<ImageDataset> {
  const written = await writePngFolder(ds, dir, perClass, classes);
  const folderName = (label: number) => ds.classNames[label].replace(/[^A-Za-z0-9-]/g, '_');
  const classNames = [...new Set(written.map((i) => folderName(ds.labels[i])))].sort();
  const copy = subset(ds, written);
  const labels = Int32Array.from(written, (i) => classNames.indexOf(folderName(ds.labels[i])));
  return createDataset({ ...copy, name: 'png-copy', labels, numClasses: classNames.length, classNames });
}

/** A synthetic RGB "photo" (smooth gradients and noise, seeded) of width x height, as a real JPEG file. */
export async function writeJpeg(path: string, width: number, height: number, seed: number): Promise<void> {
  const rng = new Rng(seed);
  const px = Buffer.alloc(width * height * 3);
  const [a, b, c] = [rng.uniform(), rng.uniform(), rng.uniform()];
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const o = (y * width + x) * 3;
      px[o] = Math.round(255 * (x / width) * a);
      px[o + 1] = Math.round(255 * (y / height) * b);
      px[o + 2] = Math.round(200 * c + 55 * rng.uniform());
    }
  }
  await sharp(px, { raw: { width, height, channels: 3 } })
    .jpeg({ quality: 90 })
    .toFile(path);
}
