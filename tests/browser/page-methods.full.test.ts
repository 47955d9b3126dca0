/**
 * One method of each family in the training page (headless Chromium, tfjs's JS cpu backend),
 * set up through the page's own fields (method arguments, ViT patch size): BYOL (momentum
 * target), MoCo v2+ (queue of negatives), SwAV (prototypes and a queue) and MAE on vit_tiny.
 * Each trains two steps on 8 px images, pausing after each: both losses are finite, the
 * steps advance, and for the state methods the state in the page's downloaded checkpoint
 * moved from step 1 to step 2 (EMA target, queue rows and pointer, prototypes).
 */
import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import * as zoo from '../../src/browser.js';
import { loadCheckpoint } from '../../src/trainer/checkpoint.js';
import { click, downloadCheckpoint, openTrainingPage, pageState, waitForStatus, waitForText, pageSuite } from './page-helpers.js';

/** A method's page settings and the checkpoint tensors (`model/<prefix>...`) that must move between steps 1 and 2. */
interface FamilyCase {
  family: string;
  method: string;
  backbone: string;
  /** The "method arguments" field: small heads and queues, so that a step takes about a second. */
  args: string;
  patchSize?: string;
  moves: string[];
}

const CASES: FamilyCase[] = [
  {
    family: 'momentum (EMA target)',
    method: 'byol',
    backbone: 'mlp',
    args: 'projHiddenDim=32 projOutputDim=16 predHiddenDim=32',
    moves: ['momentumBackbone.', 'momentumProjector.'],
  },
  {
    family: 'queue',
    method: 'mocov2plus',
    backbone: 'mlp',
    args: 'projHiddenDim=32 projOutputDim=16 queueSize=64',
    moves: ['queue.bank', 'queue.pointer', 'momentumBackbone.'],
  },
  // SwAV's local crops are smaller than the image: the mlp backbone takes full-size images only.
  {
    family: 'clustering',
    method: 'swav',
    backbone: 'tiny_resnet',
    args: 'projHiddenDim=32 projOutputDim=16 numPrototypes=10 queueSize=16 freezePrototypesEpochs=0',
    moves: ['prototypes.weight', 'queue.bank', 'queue.pointer'],
  },
  {
    family: 'masked image modelling on a ViT',
    method: 'mae',
    backbone: 'vit_tiny',
    args: 'decoderEmbedDim=32 decoderDepth=1 decoderNumHeads=4',
    patchSize: '4',
    moves: [],
  },
];

/** The tensors of a checkpoint file whose names start with `model/<prefix>`, as arrays. */
function stateOf(path: string, prefix: string): Map<string, Float32Array | Int32Array> {
  const { tensors } = loadCheckpoint(path);
  const out = new Map<string, Float32Array | Int32Array>();
  for (const [name, t] of Object.entries(tensors)) if (name.startsWith(`model/${prefix}`)) out.set(name, t.dataSync() as Float32Array | Int32Array);
  zoo.tf.dispose(Object.values(tensors));
  return out;
}

describe('one method of each family in the training page (headless Chromium)', function () {
  this.timeout(300_000);
  const suite = pageSuite(2, 8, 8);

  for (const c of CASES) {
    it(`${c.family}: ${c.method} on ${c.backbone}, two steps: finite losses, the steps advance${c.moves.length ? ', its state moved' : ''}`, async () => {
      const { page, requests, errors } = await openTrainingPage(suite.browser);
      const settings = { 'image-size': '8', 'batch-size': '4', epochs: '2', seed: '1', 'method-args': c.args, 'patch-size': c.patchSize ?? '' };
      await page.selectOption('#engine', 'cpu');
      for (const [id, value] of Object.entries(settings)) await page.fill(`#${id}`, value);
      await page.selectOption('#method', c.method);
      await page.selectOption('#backbone', c.backbone);
      await page.setInputFiles('#folder', join(suite.dir, 'images'));
      await waitForText(page, 'data-status', /^16 images, 8 x 8 px, 2 classes/);
      const loaded = requests.length;
      const checkpoints: string[] = [];
      for (const step of [1, 2]) {
        await page.fill('#pause-at', String(step));
        await click(page, 'start');
        await waitForStatus(page, new RegExp(`^Paused at step ${step} / 8; saved in this browser\\.$`), 120_000);
        checkpoints.push(await downloadCheckpoint(page, join(suite.dir, `${c.method}-${step}.ckpt`)));
      }
      const { losses, step } = await pageState(page);
      assert.equal(step, 2);
      assert.equal(losses.length, 2);
      assert.ok(losses.every(Number.isFinite), `losses ${losses.join(' ')}`);
      for (const prefix of c.moves) {
        const [first, second] = checkpoints.map((path) => stateOf(path, prefix));
        assert.ok(first!.size > 0, `the checkpoint has no model/${prefix}* tensor`);
        const moved = [...first!].some(([name, values]) => values.some((v, i) => v !== second!.get(name)![i]));
        assert.ok(moved, `model/${prefix}* is the same at steps 1 and 2`);
      }
      assert.deepEqual(requests.slice(loaded), [], 'no request after the images were picked');
      assert.deepEqual(errors, []);
      await page.context().close();
    });
  }
});
