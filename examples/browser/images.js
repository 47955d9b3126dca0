/* global createImageBitmap, OffscreenCanvas */
/**
 * The picked images as pixels, decoded in the page: never sent anywhere. A file's class is the
 * first sub-folder under the picked folder (a folder with images outside class sub-folders is
 * unlabelled), as `ssl-train --dataset folder` reads it; files are taken in path order.
 */

/** Image file names `ssl-train` reads too. */
const IMAGE = /\.(png|jpe?g|webp)$/i;

/** `{ file, path }` for every image among `files` (a file input's or a drop's), `path` relative to the picked folder. */
export function imageEntries(files) {
  return files
    .map(({ file, path }) => ({ file, path: path.split('/').slice(1).join('/') || file.name }))
    .filter(({ path }) => IMAGE.test(path) && !path.split('/').some((part) => part.startsWith('.')))
    .sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

/** The files of a `<input webkitdirectory>` with their paths (`folder/class/name.png`). */
export function inputFiles(input) {
  return Array.from(input.files, (file) => ({ file, path: file.webkitRelativePath || file.name }));
}

/** Every file under a dropped directory entry (`DataTransferItem.webkitGetAsEntry()`), with its path. */
export async function entryFiles(entry, prefix = '') {
  const path = `${prefix}${entry.name}`;
  if (entry.isFile) return [{ file: await new Promise((resolve, reject) => entry.file(resolve, reject)), path }];
  const reader = entry.createReader();
  const children = [];
  for (;;) {
    const batch = await new Promise((resolve, reject) => reader.readEntries(resolve, reject));
    if (batch.length === 0) break;
    children.push(...batch);
  }
  return (await Promise.all(children.map((child) => entryFiles(child, `${path}/`)))).flat();
}

/** Every file under a File System Access directory handle (`showDirectoryPicker()`), with its path. */
export async function handleFiles(handle, prefix = '') {
  const path = `${prefix}${handle.name}`;
  if (handle.kind === 'file') return [{ file: await handle.getFile(), path }];
  const out = [];
  for await (const child of handle.values()) out.push(...(await handleFiles(child, `${path}/`)));
  return out;
}

/**
 * Decodes `entries` to `size` x `size` RGB bytes (resized to cover the square, centre-cropped,
 * as `ssl-train` resizes folder images); `onProgress(done, total)` after each. Files that do not
 * decode are skipped and named in `skipped`.
 */
export async function decodeImages(entries, size, onProgress = () => {}) {
  const classOf = entries.map(({ path }) => (path.includes('/') ? path.split('/')[0] : undefined));
  const labelled = classOf.every((c) => c !== undefined);
  const classNames = labelled ? [...new Set(classOf)].sort() : ['unlabelled'];
  const canvas = new OffscreenCanvas(size, size);
  const context = canvas.getContext('2d', { willReadFrequently: true });
  const pixels = new Uint8Array(entries.length * size * size * 3);
  const labels = [];
  const skipped = [];
  let n = 0;
  for (let i = 0; i < entries.length; i++) {
    let bitmap;
    try {
      bitmap = await createImageBitmap(entries[i].file);
    } catch (e) {
      skipped.push(`${entries[i].path}: ${e.message}`);
      continue;
    }
    const scale = size / Math.min(bitmap.width, bitmap.height);
    const w = bitmap.width * scale;
    const h = bitmap.height * scale;
    context.clearRect(0, 0, size, size);
    context.drawImage(bitmap, (size - w) / 2, (size - h) / 2, w, h);
    bitmap.close();
    const rgba = context.getImageData(0, 0, size, size).data;
    const out = n * size * size * 3;
    for (let p = 0; p < size * size; p++) {
      pixels[out + 3 * p] = rgba[4 * p];
      pixels[out + 3 * p + 1] = rgba[4 * p + 1];
      pixels[out + 3 * p + 2] = rgba[4 * p + 2];
    }
    labels.push(labelled ? classNames.indexOf(classOf[i]) : 0);
    n++;
    onProgress(i + 1, entries.length);
  }
  return { images: { pixels: pixels.slice(0, n * size * size * 3), length: n, size, channels: 3, labels: Int32Array.from(labels), classNames }, skipped };
}
