/**
 * The page's training run (examples/browser/session.ts) and `ssl-train` share one checkpoint
 * format: the session runs here on the library's Node modules (the page runs the same code
 * on the bundle: page.full.test.ts), its checkpoint bytes continue with `ssl-train --resume`,
 * and a Node `last.ckpt` continues in the session, each at the step it reached.
 */
import { strict as assert } from 'node:assert';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import * as zoo from '../../src/browser.js';
import { loadCheckpoint } from '../../src/trainer/checkpoint.js';
import { TrainingSession, type PixelImages, type RunSettings } from '../../examples/browser/session.js';
import { writePngFolder } from '../helpers/image-folder.js';
import { runCli, tempDir } from '../helpers/run.js';
import { relativeDiff, runTfjs, TOLERANCE } from '../export/helpers.js';
import { readNpy } from '../helpers/npy.js';

/** 16 images of 8 px in two classes, batch 4: 4 steps an epoch, 3 epochs. */
const SETTINGS: RunSettings = {
  method: 'simclr',
  backbone: 'mlp',
  imageSize: 8,
  batchSize: 4,
  epochs: 3,
  seed: 5,
  methodArgs: { projHiddenDim: 16, projOutputDim: 8 },
};

/** The PNG folder decoded as the page decodes it: sorted paths, class = first sub-folder, RGB bytes. */
async function decodeFolder(dir: string): Promise<PixelImages> {
  const classNames = readdirSync(dir).sort();
  const files = classNames.flatMap((c) => readdirSync(join(dir, c)).map((name) => `${c}/${name}`)).sort();
  const size = SETTINGS.imageSize;
  const pixels = new Uint8Array(files.length * size * size * 3);
  for (const [i, file] of files.entries()) pixels.set(await sharp(join(dir, file)).removeAlpha().raw().toBuffer(), i * size * size * 3);
  const labels = Int32Array.from(files, (f) => classNames.indexOf(f.split('/')[0]));
  return { pixels, length: files.length, size, channels: 3, labels, classNames };
}

/** The final line of a training run's stdout: `{ runDir, step, ... }`. */
function finalStep(stdout: string): number {
  return (JSON.parse(stdout.trim().split('\n').pop()!) as { step: number }).step;
}

/** The training loss of the last step a run directory's metrics.jsonl logged. */
function lastLoss(runDir: string): number {
  return (JSON.parse(readFileSync(join(runDir, 'metrics.jsonl'), 'utf8').trim().split('\n').pop()!) as Record<string, number>)['train/loss'];
}

describe('the browser page session and ssl-train: one checkpoint format', function () {
  let dir: string;
  let images: PixelImages;

  before(async () => {
    dir = tempDir();
    const ds = zoo.syntheticDataset({ split: 'train', seed: 1, size: 128, imageSize: SETTINGS.imageSize, channels: 3 });
    await writePngFolder(ds, join(dir, 'images'), 8, 2);
    images = await decodeFolder(join(dir, 'images'));
  });

  it("a session's checkpoint continues in ssl-train --resume at the step it reached, with the session's own next loss", async () => {
    assert.equal(images.length, 16);
    const session = TrainingSession.create(zoo, SETTINGS, images);
    try {
      const losses = [await session.trainStep(), await session.trainStep()].map((r) => r.loss);
      assert.ok(losses.every(Number.isFinite));
      const path = join(dir, 'page.ckpt');
      writeFileSync(path, await session.checkpoint());
      const saved = loadCheckpoint(path);
      assert.deepEqual(saved.meta.progress, { epoch: 0, step: 2, batchInEpoch: 2 });
      zoo.tf.dispose(Object.values(saved.tensors));
      const command = session.nodeCommand(path, join(dir, 'images')).split(' ').slice(1);
      const run = runCli([...command, '--backend', 'cpu', '--workers', '0', '--max-steps', '3', '--run-dir', join(dir, 'node-run')]);
      assert.equal(run.status, 0, run.stderr);
      assert.match(run.stderr, /resuming from .*page\.ckpt \(epoch 1, batch 2, step 2\)/);
      assert.equal(finalStep(run.stdout), 3);
      // The same run: Node's third step is the session's own third step.
      const nodeLoss = lastLoss(join(dir, 'node-run'));
      const pageLoss = (await session.trainStep()).loss;
      assert.ok(Math.abs(nodeLoss - pageLoss) <= 1e-4 * Math.abs(pageLoss), `Node ${nodeLoss}, session ${pageLoss}`);
    } finally {
      session.dispose();
    }
  });

  it("ssl-train's last.ckpt continues in a session at the step it reached, with ssl-train's own next loss", async () => {
    const reference = TrainingSession.create(zoo, SETTINGS, images);
    const command = reference.nodeCommand('x', join(dir, 'images')).split(' ').slice(1, -2);
    reference.dispose();
    const runDir = join(dir, 'node-first');
    const run = runCli([...command, '--backend', 'cpu', '--workers', '0', '--max-steps', '5', '--run-dir', runDir]);
    assert.equal(run.status, 0, run.stderr);
    const session = await TrainingSession.resume(zoo, new Uint8Array(readFileSync(join(runDir, 'checkpoints', 'last.ckpt'))), images);
    try {
      assert.equal(session.step, 5);
      assert.equal(session.epoch, 1);
      assert.deepEqual(session.settings.methodArgs && { h: session.settings.methodArgs.projHiddenDim, o: session.settings.methodArgs.projOutputDim }, {
        h: 16,
        o: 8,
      });
      const next = await session.trainStep();
      assert.equal(next.step, 6);
      // The same run: the session's sixth step is that of ssl-train running six steps.
      const straight = runCli([...command, '--backend', 'cpu', '--workers', '0', '--max-steps', '6', '--run-dir', join(dir, 'node-six')]);
      assert.equal(straight.status, 0, straight.stderr);
      const nodeLoss = lastLoss(join(dir, 'node-six'));
      assert.ok(Math.abs(nodeLoss - next.loss) <= 1e-4 * Math.abs(nodeLoss), `Node ${nodeLoss}, session ${next.loss}`);
    } finally {
      session.dispose();
    }
  });

  it("the session's tfjs export gives ssl-train embed's features of its checkpoint (float32 round-off)", async () => {
    const session = TrainingSession.create(zoo, SETTINGS, images);
    try {
      await session.trainStep();
      await session.trainStep();
      const checkpoint = join(dir, 'export.ckpt');
      writeFileSync(checkpoint, await session.checkpoint());
      const model = join(dir, 'export');
      mkdirSync(model, { recursive: true });
      const files = await session.exportTfjs();
      assert.deepEqual(files.map(([name]) => name).sort(), ['group1-shard1of1.bin', 'model.json', 'ssl-zoo.json']);
      for (const [name, content] of files) writeFileSync(join(model, name), content);
      const size = SETTINGS.imageSize;
      const x = zoo.tf.tensor4d(
        Float32Array.from(images.pixels, (v) => v / 255),
        [images.length, size, size, 3],
      );
      const [exported] = await runTfjs(model, x);
      x.dispose();
      const out = join(dir, 'embed.npy');
      const data = ['--dataset', 'folder', '--data-dir', join(dir, 'images'), '--val-dir', join(dir, 'images'), '--split', 'train'];
      const embed = runCli(['embed', '--checkpoint', checkpoint, ...data, '--out', out, '--backend', 'cpu']);
      assert.equal(embed.status, 0, embed.stderr);
      const features = readNpy(out);
      assert.deepEqual(features.shape, [images.length, session.method.backbone.featureDim]);
      const diff = relativeDiff(features.values as Float32Array, exported!);
      assert.ok(diff <= TOLERANCE, `features differ by ${diff} (relative to the largest) > ${TOLERANCE}`);
    } finally {
      session.dispose();
    }
  });

  it('refuses a checkpoint of other images, and bytes that are not a checkpoint, with one line', async () => {
    const other = { ...images, size: 4, pixels: new Uint8Array(16 * 4 * 4 * 3) };
    const session = TrainingSession.create(zoo, SETTINGS, images);
    const bytes = await session.checkpoint();
    session.dispose();
    await assert.rejects(
      TrainingSession.resume(zoo, bytes, other),
      (e: Error) => e instanceof zoo.UserError && /trained on 8 px images; the page decoded the folder at 4 px/.test(e.message),
    );
    const corrupt = bytes.slice();
    corrupt[corrupt.length - 1] ^= 0xff;
    await assert.rejects(TrainingSession.resume(zoo, corrupt, images), /the checkpoint is corrupt \(its tensor data does not match its checksum\)/);
    await assert.rejects(TrainingSession.resume(zoo, new TextEncoder().encode('not a checkpoint at all'), images), /not an ssl-zoo checkpoint/);
  });
});
