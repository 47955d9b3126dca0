/* global document, window, Option */
/**
 * The training page: pick or drop a folder, choose a method and backbone, train with a live
 * chart, pause (the run goes to IndexedDB) and continue after a reload, download the
 * checkpoint (continue it with `ssl-train --resume`) or load one of ssl-train's, export the
 * backbone. Everything runs here; the page fetches only its own files, at load.
 */
import * as zoo from './ssl-zoo.js';
import { SessionClient } from './session-client.js';
import { createSessionHost } from './session-host.js';
import { decodeImages, entryFiles, handleFiles, imageEntries, inputFiles } from './images.js';
import { clearRun, loadRun, saveRun } from './store.js';
import { drawChart } from './chart.js';
import { drawScatter, knnLeaveOneOut, probeRows, umap2d } from './probe.js';
import { LINEAR_PROBE_DEFAULTS } from './linear-probe.js';

const $ = (id) => document.getElementById(id);
/**
 * What the page holds; `window.sslPage` exposes it (the browser test reads it). `worker` is
 * the training worker's client (undefined where none started), `trainer` the client of where
 * the run lives (the worker, or this thread with the box unticked), chosen when the engine
 * starts; `session` is `trainer` once it holds a run.
 */
const state = {
  ...{ entries: [], images: undefined, worker: undefined, trainer: undefined, session: undefined },
  ...{ history: [], running: false, engine: undefined, error: undefined, probe: undefined },
};

function status(text) {
  $('status').textContent = text;
}

function fail(e) {
  state.error = e instanceof Error ? e.message : String(e);
  status(`Error: ${state.error}`);
}

/** The "method arguments" field (`name=value`, space- or comma-separated, as `--method-arg`) as `methodArgs`. */
function methodArgs(text) {
  const args = {};
  for (const pair of text.split(/[\s,]+/).filter(Boolean)) {
    const match = /^([A-Za-z][A-Za-z0-9]*)=(.+)$/.exec(pair);
    const value = match ? zoo.parseArgValue(match[2]) : undefined;
    if (value === undefined) throw new zoo.UserError(`method arguments: "${pair}" is not allowed; expected name=value with a number, true or false, or a word`);
    args[match[1]] = value;
  }
  return args;
}

/** `methodArgs` as the field shows them. */
function methodArgsText(args) {
  return Object.entries(args ?? {})
    .map(([name, value]) => `${name}=${value}`)
    .join(' ');
}

function settings() {
  const number = (id) => Number($(id).value);
  return {
    method: $('method').value,
    backbone: $('backbone').value,
    imageSize: number('image-size'),
    batchSize: number('batch-size'),
    epochs: number('epochs'),
    seed: number('seed'),
    methodArgs: methodArgs($('method-args').value),
    ...($('lr').value === '' ? {} : { lr: number('lr') }),
    ...($('patch-size').value === '' ? {} : { patchSize: number('patch-size') }),
  };
}

function refreshButtons() {
  const { session, running, images } = state;
  $('start').disabled = running || (!images && !session) || Boolean(session?.finished);
  $('start').textContent = session && session.step > 0 ? 'Continue' : 'Start';
  $('pause').disabled = !running;
  $('download-checkpoint').disabled = running || !session;
  $('export').disabled = running || !session;
  $('probe').disabled = running || !session || !labelled(images);
}

/** Whether the images came in class sub-folders (two or more): what the probe needs. */
function labelled(images) {
  return Boolean(images) && images.classNames.length >= 2;
}

/**
 * The probe at the session's step: the backbone's features of up to 256 labelled images,
 * their leave-one-out kNN top-1 and their UMAP drawn coloured by class (probe.js), and a
 * linear probe (linear-probe.js: a softmax classifier trained on a seeded half of each class,
 * its top-1 on the other half).
 */
async function probe() {
  const { session, images } = state;
  const step = session.step;
  $('probe-status').textContent = `Probing at step ${step}…`;
  $('linear-status').textContent = '';
  await new Promise((resolve) => setTimeout(resolve, 0));
  const rows = probeRows(images.length);
  const labels = Int32Array.from(rows, (row) => images.labels[row]);
  const { values, dim } = await session.features(rows);
  const knn = knnLeaveOneOut(values, dim, labels, images.classNames.length);
  drawScatter($('umap'), umap2d(values, rows.length, dim, session.settings.seed), labels, images.classNames);
  state.probe = { ...knn, step, rows, labels, features: values, dim };
  $('probe-status').textContent =
    `kNN top-1 ${knn.accuracy.toFixed(3)} at step ${step} (leave-one-out over ${knn.images} labelled images, ` +
    `k = ${knn.k}, cosine similarity); the UMAP of the same features, coloured by class:`;
  $('linear-status').textContent = `Training the linear probe at step ${step}…`;
  const settings = { ...LINEAR_PROBE_DEFAULTS, seed: session.settings.seed };
  const linear = await session.linearProbe({ values, dim }, labels, images.classNames.length, settings);
  state.probe.linear = { ...linear, settings };
  $('linear-status').textContent =
    `Linear probe top-1 ${linear.testAccuracy.toFixed(3)} at step ${step} on ${linear.testImages} test images ` +
    `(a softmax classifier on the standardised features of the other ${linear.trainImages}, a seeded half of each class; ` +
    `${settings.epochs} epochs of SGD, batch ${linear.batchSize}, lr ${settings.lr}, cosine; training top-1 ${linear.trainAccuracy.toFixed(3)}).`;
}

/** Starts the chosen engine where the run lives (the worker, unless unticked), once; the backend in use. */
async function engine() {
  if (!state.trainer) {
    state.trainer = state.worker && $('use-worker').checked ? state.worker : SessionClient.onPage(createSessionHost());
    $('use-worker').disabled = true;
  }
  state.engine ??= await state.trainer.engine($('engine').value);
  return state.engine;
}

/** Decodes the picked files at the chosen image size. */
async function useFiles(files) {
  state.entries = imageEntries(files);
  if (state.entries.length === 0) {
    $('data-status').textContent = 'No images (png, jpg, jpeg, webp) in that folder.';
    return;
  }
  await state.session?.dispose();
  state.session = undefined;
  state.history = [];
  const { images, skipped } = await decodeImages(state.entries, Number($('image-size').value), (done, total) => {
    $('data-status').textContent = `Decoding ${done} / ${total} images in this page…`;
  });
  state.images = images;
  const classes = images.classNames[0] === 'unlabelled' ? 'no class sub-folders' : `${images.classNames.length} classes (${images.classNames.join(', ')})`;
  $('data-status').textContent =
    `${images.length} images, ${images.size} x ${images.size} px, ${classes}${skipped.length ? `; skipped ${skipped.length}: ${skipped.join('; ')}` : ''}.`;
  drawChart($('chart'), state.history);
  refreshButtons();
}

async function save() {
  const { session } = state;
  await saveRun({
    checkpoint: await session.checkpoint(),
    images: state.images,
    history: state.history,
    step: session.step,
    engine: state.engine,
    settings: session.settings,
    savedAt: Date.now(),
  });
}

/**
 * Resolves after the page has had a chance to handle input and paint a frame (an animation
 * frame, or 100 ms where none comes: a hidden tab paints none): training yields to it after
 * every step.
 */
function nextFrame() {
  return Promise.race([
    new Promise((resolve) => window.requestAnimationFrame(() => setTimeout(resolve, 0))),
    new Promise((resolve) => setTimeout(resolve, 100)),
  ]);
}

async function train() {
  try {
    await engine();
    if (!state.session) {
      await state.trainer.create(settings(), state.images);
      state.session = state.trainer;
    }
    const session = state.session;
    state.running = true;
    refreshButtons();
    const pauseAt = Number($('pause-at').value) || Infinity;
    while (state.running && !session.finished && session.step < pauseAt) {
      const result = await session.trainStep();
      state.history.push(result);
      status(
        `Step ${result.step} / ${session.totalSteps} (epoch ${result.epoch + 1}), loss ${result.loss.toFixed(4)}, ${result.imagesPerSecond.toFixed(1)} images/s on ${state.engine}`,
      );
      drawChart($('chart'), state.history);
      await nextFrame();
    }
    state.running = false;
    state.trainEnded = performance.now();
    await save();
    status(`${session.finished ? 'Finished' : 'Paused'} at step ${session.step} / ${session.totalSteps}; saved in this browser.`);
    $('node-command').textContent = `Continue in Node: ${await session.nodeCommand('page.ckpt', 'DIR')}`;
    if (labelled(state.images)) await probe();
  } catch (e) {
    state.running = false;
    fail(e);
  }
  refreshButtons();
}

function offerDownload(name, bytes, type = 'application/octet-stream') {
  const url = URL.createObjectURL(new Blob([bytes], { type }));
  const link = document.createElement('a');
  link.href = url;
  link.download = name;
  link.textContent = `${name} (${bytes.length ?? bytes.byteLength} bytes)`;
  const item = document.createElement('li');
  item.append(link);
  $('downloads').append(item);
  return link;
}

async function downloadCheckpoint() {
  const bytes = await state.session.checkpoint();
  state.downloadedCheckpoint = bytes;
  offerDownload(`${state.session.settings.method}-step${state.session.step}.ckpt`, bytes).click();
}

/** Offers the backbone's tfjs export (`ssl-train export --format tfjs`'s files) as downloads. */
async function exportBackbone() {
  const step = state.session.step;
  for (const [name, content] of await state.session.exportTfjs()) {
    const type = name.endsWith('.json') ? 'application/json' : 'application/octet-stream';
    offerDownload(name, typeof content === 'string' ? new TextEncoder().encode(content) : content, type).dataset.export = `step ${step}`;
  }
  status(`Exported the backbone at step ${step}: model.json, group1-shard1of1.bin and ssl-zoo.json below (load with tf.loadLayersModel).`);
}

async function loadCheckpoint(file) {
  try {
    if (!state.images) throw new Error('pick the folder of images first (the checkpoint holds the weights, not the images)');
    await engine();
    await state.trainer.resume(new Uint8Array(await file.arrayBuffer()), state.images);
    state.session = state.trainer;
    const session = state.session;
    state.history = [];
    for (const [id, key] of [
      ['method', 'method'],
      ['backbone', 'backbone'],
      ['batch-size', 'batchSize'],
      ['epochs', 'epochs'],
      ['seed', 'seed'],
      ['lr', 'lr'],
      ['patch-size', 'patchSize'],
    ])
      $(id).value = session.settings[key] ?? '';
    $('method-args').value = methodArgsText(session.settings.methodArgs);
    status(`Loaded ${file.name}: ${session.settings.method} on ${session.settings.backbone}, step ${session.step} / ${session.totalSteps}.`);
  } catch (e) {
    fail(e);
  }
  refreshButtons();
}

async function offerResume() {
  const saved = await loadRun();
  if (!saved) return;
  $('resume-text').textContent =
    `A ${saved.settings.method} run on ${saved.settings.backbone} (${saved.images.length} images) stopped at step ${saved.step}. Continue it?`;
  $('resume-offer').hidden = false;
  $('resume-continue').onclick = async () => {
    $('resume-offer').hidden = true;
    try {
      if (saved.engine) $('engine').value = saved.engine;
      await engine();
      state.images = saved.images;
      state.history = saved.history;
      await state.trainer.resume(saved.checkpoint, saved.images);
      state.session = state.trainer;
      $('image-size').value = saved.images.size;
      $('data-status').textContent = `${saved.images.length} images from the saved run (kept in this browser).`;
      status(`Restored step ${state.session.step} / ${state.session.totalSteps}.`);
      drawChart($('chart'), state.history);
      refreshButtons();
      await train();
    } catch (e) {
      fail(e);
    }
  };
  $('resume-discard').onclick = async () => {
    $('resume-offer').hidden = true;
    await clearRun();
  };
}

function setUp() {
  for (const name of zoo.methodNames()) $('method').append(new Option(name, name));
  for (const name of zoo.BACKBONE_NAMES) $('backbone').append(new Option(name, name, name === 'tiny_resnet', name === 'tiny_resnet'));
  $('method').value = 'simclr';
  $('folder').addEventListener('change', () => useFiles(inputFiles($('folder'))).catch(fail));
  const drop = $('drop');
  drop.addEventListener('dragover', (event) => {
    event.preventDefault();
    drop.classList.add('over');
  });
  drop.addEventListener('dragleave', () => drop.classList.remove('over'));
  drop.addEventListener('drop', (event) => {
    event.preventDefault();
    drop.classList.remove('over');
    const entries = Array.from(event.dataTransfer.items, (item) => item.webkitGetAsEntry?.()).filter(Boolean);
    Promise.all(entries.map((entry) => entryFiles(entry)))
      .then((lists) => useFiles(lists.flat()))
      .catch(fail);
  });
  if (typeof window.showDirectoryPicker === 'function') {
    $('pick').hidden = false;
    $('pick').addEventListener('click', async () => {
      try {
        await useFiles(await handleFiles(await window.showDirectoryPicker()));
      } catch (e) {
        if (e.name !== 'AbortError') fail(e);
      }
    });
  }
  $('start').addEventListener('click', train);
  $('pause').addEventListener('click', () => {
    state.running = false;
  });
  $('download-checkpoint').addEventListener('click', () => downloadCheckpoint().catch(fail));
  $('export').addEventListener('click', () => exportBackbone().catch(fail));
  $('probe').addEventListener('click', () => probe().catch(fail));
  $('load-checkpoint').addEventListener('change', () => loadCheckpoint($('load-checkpoint').files[0]));
  drawChart($('chart'), state.history);
  refreshButtons();
}

/**
 * Sets the page up, starts the training worker (at load: the page fetches nothing later), then
 * exposes the page's state as `window.sslPage` (the browser test waits for it) and offers a saved run.
 */
async function start() {
  setUp();
  try {
    state.worker = await SessionClient.inWorker();
  } catch (e) {
    $('use-worker').checked = false;
    $('use-worker').disabled = true;
    $('worker-note').textContent = ` (${e.message}: the run trains on the page's thread)`;
  }
  window.sslPage = state;
  await offerResume();
}

start().catch(fail);
