import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { UserError } from '../../src/core/errors.js';
import { loadImageFolder, normalizationFor, subset, syntheticDataset, type ImageFolderOptions } from '../../src/data/index.js';
import { writeJpeg, writePngFolder } from '../helpers/image-folder.js';
import { tempDir } from '../helpers/run.js';

const gray = syntheticDataset({ split: 'train', seed: 3, size: 200, imageSize: 16 });
const base = (dir: string): ImageFolderOptions => ({ dir, valFraction: 0.2, unlabelled: false, imageSize: 16, seed: 0 });

async function rejects(options: ImageFolderOptions, pattern: RegExp): Promise<void> {
  await assert.rejects(loadImageFolder(options), (e: Error) => e instanceof UserError && pattern.test(e.message) && !e.message.includes('\n'));
}

describe('data/folder: listing, labels, validation split', () => {
  const dir = tempDir();
  let written: number[];
  before(async () => {
    written = await writePngFolder(gray, join(dir, 'train'), 10, 4);
  });

  it('classes are the sorted subfolder names; files sorted; labels by folder', async () => {
    const { train, val, skippedFiles } = await loadImageFolder({ ...base(join(dir, 'train')), valFraction: 0.3 });
    const expected = [...new Set(written.map((i) => gray.classNames[gray.labels[i]].replace(/[^A-Za-z0-9-]/g, '_')))].sort();
    assert.deepEqual([...train.classNames], expected);
    assert.equal(skippedFiles, 0);
    assert.equal(train.length + val!.length, 40);
    for (const ds of [train, val!]) {
      assert.deepEqual([...ds.files], [...ds.files].sort());
      ds.files.forEach((f, i) => assert.equal(f.split('/').at(-2), ds.classNames[ds.labels[i]]));
    }
  });

  it('--val-fraction is stratified (round(f * n_c) per class), disjoint from train and seeded', async () => {
    const a = await loadImageFolder({ ...base(join(dir, 'train')), valFraction: 0.3, seed: 5 });
    const b = await loadImageFolder({ ...base(join(dir, 'train')), valFraction: 0.3, seed: 5 });
    const c = await loadImageFolder({ ...base(join(dir, 'train')), valFraction: 0.3, seed: 6 });
    assert.deepEqual(a.val!.files, b.val!.files);
    assert.notDeepEqual(a.val!.files, c.val!.files);
    for (let k = 0; k < 4; k++) assert.equal([...a.val!.labels].filter((l) => l === k).length, 3);
    assert.equal(new Set([...a.train.files, ...a.val!.files]).size, 40);
  });

  it('--val-dir: labels by class name, a subset of the classes is allowed, unknown classes refused', async () => {
    await writePngFolder(gray, join(dir, 'val'), 2, 2);
    const { train, val } = await loadImageFolder({ ...base(join(dir, 'train')), valDir: join(dir, 'val') });
    assert.equal(train.length, 40);
    assert.equal(val!.length, 4);
    val!.files.forEach((f, i) => assert.equal(f.split('/').at(-2), train.classNames[val!.labels[i]]));
    mkdirSync(join(dir, 'val2', 'Zebra'), { recursive: true });
    await writeJpeg(join(dir, 'val2', 'Zebra', 'z.jpg'), 20, 20, 1);
    await rejects({ ...base(join(dir, 'train')), valDir: join(dir, 'val2') }, /--val-dir: class folders Zebra of .* are not classes of/);
  });

  it('channels: 1 for grayscale images, 3 once a sampled image has colour, or as forced; stats from the sample', async () => {
    const { train } = await loadImageFolder(base(join(dir, 'train')));
    assert.equal(train.channels, 1);
    // the sample covers every training image here, so the stats are the images' own
    const inMemory = subset(
      gray,
      written.filter((i) => train.files.some((f) => f.endsWith(`${String(i).padStart(5, '0')}.png`))),
    );
    const s = normalizationFor(train);
    const t = normalizationFor({ ...inMemory, name: 'x' });
    assert.ok(Math.abs(s.mean[0] - t.mean[0]) < 1e-9 && Math.abs(s.std[0] - t.std[0]) < 1e-9, `${JSON.stringify(s)} vs ${JSON.stringify(t)}`);
    const forced = await loadImageFolder({ ...base(join(dir, 'train')), channels: 3 });
    assert.equal(forced.train.channels, 3);
    await writeJpeg(join(dir, 'train', train.classNames[0], 'colour.jpg'), 30, 20, 2);
    const mixed = await loadImageFolder(base(join(dir, 'train')));
    assert.equal(mixed.train.channels, 3);
  });
});

describe('data/folder: unlabelled, skipped names and bad input', () => {
  it('--unlabelled: flat and nested folders, one class, no validation split', async () => {
    const dir = tempDir();
    await writeJpeg(join(dir, 'a.jpg'), 40, 30, 1);
    mkdirSync(join(dir, 'x', 'y'), { recursive: true });
    await writeJpeg(join(dir, 'x', 'y', 'b.JPEG'), 25, 50, 2);
    await writeJpeg(join(dir, 'x', 'c.jpeg'), 64, 64, 3);
    const { train, val } = await loadImageFolder({ ...base(dir), unlabelled: true });
    assert.equal(val, undefined);
    assert.equal(train.labelled, false);
    assert.deepEqual([...train.classNames], ['unlabelled']);
    assert.deepEqual(
      train.files.map((f) => f.slice(dir.length + 1)),
      ['a.jpg', 'x/c.jpeg', 'x/y/b.JPEG'],
    );
    assert.deepEqual([...train.labels], [0, 0, 0]);
  });

  it('files that are not images by name, or outside class folders, are reported once each and counted', async () => {
    const dir = tempDir();
    await writePngFolder(gray, dir, 3, 2);
    writeFileSync(join(dir, 'README.md'), 'hello');
    writeFileSync(join(dir, gray.classNames[0], 'notes.txt'), 'hello');
    await writeJpeg(join(dir, 'loose.jpg'), 16, 16, 1);
    const seen: string[] = [];
    const { train, skippedFiles } = await loadImageFolder({ ...base(dir), onSkip: (path, reason) => seen.push(`${path.slice(dir.length + 1)}: ${reason}`) });
    assert.equal(skippedFiles, 3);
    assert.equal(train.length, 4); // 6 images; 0.2 of 3 per class rounds to 1 held out each
    assert.deepEqual(
      seen.sort(),
      [
        'README.md: not an image (.jpg, .jpeg, .png, .webp)',
        `${gray.classNames[0]}/notes.txt: not an image (.jpg, .jpeg, .png, .webp)`,
        'loose.jpg: not in a class folder',
      ].sort(),
    );
  });

  it('bad input: missing, not a folder, empty, no images, one class, only loose images, nothing decodable', async () => {
    const dir = tempDir();
    await rejects(base(join(dir, 'nowhere')), /^--data-dir: folder .*nowhere does not exist$/);
    writeFileSync(join(dir, 'file.png'), 'x');
    await rejects(base(join(dir, 'file.png')), /--data-dir: .*file\.png is not a folder/);
    mkdirSync(join(dir, 'empty'));
    await rejects(base(join(dir, 'empty')), /^--data-dir: no images in .*empty$/);
    mkdirSync(join(dir, 'text', 'a'), { recursive: true });
    for (let i = 0; i < 3; i++) writeFileSync(join(dir, 'text', 'a', `${i}.txt`), 'x');
    await rejects(base(join(dir, 'text')), /--data-dir: no images in .*text; its 3 files are not images/);
    await writePngFolder(gray, join(dir, 'one'), 4, 1);
    await rejects(base(join(dir, 'one')), /has images of one class only .*; --dataset folder needs at least 2 class subfolders, or --unlabelled/);
    mkdirSync(join(dir, 'loose'));
    await writeJpeg(join(dir, 'loose', 'a.jpg'), 10, 10, 1);
    await rejects(
      base(join(dir, 'loose')),
      /--data-dir: no images in .*loose; its 1 files are not images \(.*\) or not in class subfolders \(DIR\/<class>\/; --unlabelled reads any layout\)$/,
    );
    mkdirSync(join(dir, 'fake', 'a'), { recursive: true });
    mkdirSync(join(dir, 'fake', 'b'), { recursive: true });
    for (const c of ['a', 'b']) for (let i = 0; i < 3; i++) writeFileSync(join(dir, 'fake', c, `${i}.jpg`), 'not a jpeg');
    await rejects(base(join(dir, 'fake')), /--data-dir: none of the 4 sampled images of .*fake could be decoded \(.*\.jpg: /);
  });
});
