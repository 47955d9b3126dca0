/**
 * Kernel benchmark: GFLOP/s of the native (oneDNN) and pure-JS cpu kernels on matmuls and
 * on the convolutions (forward, backprop-input, backprop-filter) of a tiny ResNet (batch
 * 256, 28x28) and of ResNet-18 for CIFAR (batch 64, 32x32), next to an estimate of the
 * machine's peak; plus GB/s of the memory-bound batch-norm and element-wise kernels.
 *
 *   npm run bench:kernels            (SSL_ZOO_NUM_THREADS=n to change the thread count)
 *
 * Prints one JSON object as the last line of stdout and writes bench-results/kernels.json.
 * Native timings are the median (and best) of repeated calls after a warm-up call that
 * creates the oneDNN primitive. JS kernels are slow (about 0.5 GFLOP/s): each is timed once,
 * on a batch cut down so that the call takes about 2 s (GFLOP/s does not depend on the
 * batch for these kernels); `js.batch` says which batch was used.
 * FLOP counts are nominal: 2 * N * OH * OW * OC * C * KH * KW per convolution, padding
 * included, and 2 * M * N * K per matmul. For 3x3 stride-1 convolutions `nativeWinograd`
 * also times the Winograd path (the default; `native` is direct convolution), in
 * direct-convolution FLOPs.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { initEngine } from '../../src/core/engine.js';
import {
  batchNormTraining,
  installNativeKernels,
  nativeAddon,
  nativeAddonPath,
  nativeKernelsError,
  nativeThreads,
  oneDnnVersion,
  restoreJsKernels,
  setWinogradConvolutions,
  winogradConvolutions,
} from '../../src/core/native-kernels.js';
import { tf, type Tensor } from '../../src/core/tf.js';

const JS_SECONDS = 2;
const NATIVE_SECONDS = 1;

interface Timing {
  ms: number;
  msBest: number;
  reps: number;
}

interface Measured extends Timing {
  gflops?: number;
  gflopsBest?: number;
  gbps?: number;
  batch?: number;
  impl?: string;
  note?: string;
}

interface Row {
  name: string;
  op: string;
  shape: Record<string, unknown>;
  gflop?: number;
  mbytes?: number;
  native: Measured;
  /** With Winograd allowed (the default), for the 3x3 stride-1 convolutions it applies to. */
  nativeWinograd?: Measured;
  js: Measured;
  speedup: number;
  fractionOfPeak?: number;
}

function time(fn: () => void, seconds: number, maxReps: number, minReps = 1): Timing {
  const times: number[] = [];
  const start = performance.now();
  while (times.length < minReps || (times.length < maxReps && performance.now() - start < seconds * 1000)) {
    const t0 = performance.now();
    fn();
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  return { ms: times[Math.floor(times.length / 2)], msBest: times[0], reps: times.length };
}

/** Runs a kernel directly (not through an op), disposing its output(s). */
function kernel(name: string, inputs: Record<string, Tensor>, attrs: Record<string, unknown>): () => void {
  return () => {
    const out = tf.engine().runKernel(name, inputs, attrs as never) as Tensor | Tensor[];
    tf.dispose(out);
  };
}

function lastImpl(): string | undefined {
  const impl = (nativeAddon()?.lastImpl() ?? '').trim();
  return impl || undefined;
}

// ---------------------------------------------------------------------------------- machine

interface Machine {
  cpuModel: string;
  vendor: string;
  family: number;
  logicalCpus: number;
  availableParallelism: number;
  threads: number;
  flags: Record<string, boolean>;
  ghzNominal: number | null;
  ghzMeasured: number | null;
  flopsPerCycle: number;
  peakGflops: number;
  peakFormula: string;
  loadAverage: number[];
}

function machine(threads: number): Machine {
  let cpuinfo = '';
  try {
    cpuinfo = readFileSync('/proc/cpuinfo', 'utf8');
  } catch {
    // not Linux
  }
  const field = (name: string) => cpuinfo.match(new RegExp(`^${name}\\s*:\\s*(.*)$`, 'm'))?.[1]?.trim() ?? '';
  const flagSet = new Set(field('flags').split(/\s+/));
  const flags = Object.fromEntries(['sse2', 'avx', 'fma', 'avx2', 'avx512f'].map((f) => [f, flagSet.has(f)]));
  const vendor = field('vendor_id');
  const family = Number(field('cpu family')) || 0;
  const mhz = [...cpuinfo.matchAll(/^cpu MHz\s*:\s*([\d.]+)$/gm)].map((m) => Number(m[1]));
  const ghzNominal = mhz.length ? Math.max(...mhz) / 1000 : null;
  const measure = nativeAddon()?.measureGhz as ((seconds: number) => number) | undefined;
  const ghzMeasured = measure ? measure(0.3) : null;
  // Single-precision FLOPs per cycle per core: two FMA pipes of the vector width, x2 for FMA.
  // AMD Zen 4 (family 25) runs AVX-512 on 256-bit pipes (32); Zen 5 and Intel AVX-512 cores 64.
  let flopsPerCycle = 8;
  if (flags.avx512f) flopsPerCycle = vendor === 'AuthenticAMD' && family < 26 ? 32 : 64;
  else if (flags.avx2 && flags.fma) flopsPerCycle = 32;
  else if (flags.avx) flopsPerCycle = 16;
  const ghz = ghzMeasured ?? ghzNominal ?? 0;
  return {
    cpuModel: field('model name') || os.cpus()[0]?.model || 'unknown',
    vendor,
    family,
    logicalCpus: os.cpus().length,
    availableParallelism: os.availableParallelism(),
    threads,
    flags,
    ghzNominal,
    ghzMeasured,
    flopsPerCycle,
    peakGflops: threads * ghz * flopsPerCycle,
    peakFormula:
      'threads x GHz x FLOPs/cycle; GHz measured with a chain of dependent adds (1/cycle) on one core; ' +
      'FLOPs/cycle from /proc/cpuinfo: avx512f -> 64 (AMD family < 26, i.e. Zen 4 with 256-bit pipes: 32), ' +
      'avx2+fma -> 32, avx -> 16, else 8',
    loadAverage: os.loadavg().map((x) => Math.round(x * 100) / 100),
  };
}

// ------------------------------------------------------------------------------- benchmarks

/**
 * Times `make(batch)`'s kernel with native kernels at the full batch and with JS kernels at
 * a batch that keeps the JS call near JS_SECONDS.
 */
function measure(
  fullBatch: number,
  gflopPerSample: number,
  make: (batch: number) => { run: () => void; dispose: () => void },
  winograd = false,
): { native: Measured; nativeWinograd?: Measured; js: Measured } {
  installNativeKernels();
  const timeNative = (): Measured => {
    const full = make(fullBatch);
    try {
      full.run(); // creates (and caches) the oneDNN primitive
      const impl = lastImpl();
      const t = time(full.run, NATIVE_SECONDS, 30, 3);
      return { ...t, gflops: (gflopPerSample * fullBatch) / (t.ms / 1e3), gflopsBest: (gflopPerSample * fullBatch) / (t.msBest / 1e3), impl };
    } finally {
      full.dispose();
    }
  };
  const initial = winogradConvolutions();
  let native: Measured;
  let nativeWinograd: Measured | undefined;
  try {
    setWinogradConvolutions(false);
    native = timeNative();
    if (winograd) {
      setWinogradConvolutions(true);
      nativeWinograd = timeNative();
    }
  } finally {
    setWinogradConvolutions(initial);
  }
  restoreJsKernels();
  let js: Measured;
  try {
    // Probe one sample, then size the batch for about JS_SECONDS.
    const probe = make(1);
    let probeMs: number;
    try {
      probeMs = time(probe.run, 0, 1).ms;
    } finally {
      probe.dispose();
    }
    const batch = Math.max(1, Math.min(fullBatch, Math.floor((JS_SECONDS * 1000) / Math.max(probeMs, 1e-3))));
    const cut = batch === 1 ? null : make(batch);
    let t: Timing;
    try {
      t = cut ? time(cut.run, 0, 1) : { ms: probeMs, msBest: probeMs, reps: 1 };
    } finally {
      cut?.dispose();
    }
    js = { ...t, gflops: (gflopPerSample * batch) / (t.ms / 1e3), batch };
    if (batch < fullBatch) js.note = `timed at batch ${batch} of ${fullBatch} (one call)`;
  } finally {
    installNativeKernels();
  }
  return { native, nativeWinograd, js };
}

function matmulRow(n: number): Row {
  const gflop = (2 * n * n * n) / 1e9;
  installNativeKernels();
  const a = tf.randomNormal([n, n]);
  const b = tf.randomNormal([n, n]);
  try {
    const run = kernel('BatchMatMul', { a, b }, { transposeA: false, transposeB: false });
    run();
    const impl = lastImpl();
    const nt = time(run, NATIVE_SECONDS, 50, 3);
    restoreJsKernels();
    let jt: Timing;
    try {
      jt = time(run, 0, 1); // one call: about 5 s for n = 1024
    } finally {
      installNativeKernels();
    }
    const native: Measured = { ...nt, gflops: gflop / (nt.ms / 1e3), gflopsBest: gflop / (nt.msBest / 1e3), impl };
    const js: Measured = { ...jt, gflops: gflop / (jt.ms / 1e3), note: 'one call' };
    return { name: `matmul ${n}x${n}x${n}`, op: 'BatchMatMul', shape: { m: n, n, k: n }, gflop, native, js, speedup: jt.ms / nt.ms };
  } finally {
    tf.dispose([a, b]);
  }
}

interface ConvShape {
  net: string;
  layer: string;
  batch: number;
  hw: number;
  c: number;
  oc: number;
  k: number;
  stride: number;
}

function convRows(s: ConvShape): Row[] {
  const pad = s.k === 3 ? 1 : 0; // as the ResNets do: 3x3 with padding 1, 1x1 without
  const oh = Math.floor((s.hw + 2 * pad - s.k) / s.stride) + 1;
  const gflopPerSample = (2 * oh * oh * s.oc * s.c * s.k * s.k) / 1e9;
  const attrs = { strides: s.stride, pad, dataFormat: 'NHWC', dilations: 1 };
  const shape = { batch: s.batch, h: s.hw, w: s.hw, c: s.c, oc: s.oc, kernel: s.k, stride: s.stride, pad, outHW: oh };
  const ops: Array<[string, (batch: number) => { run: () => void; dispose: () => void }]> = [
    [
      'Conv2D',
      (batch) => {
        const x = tf.randomNormal([batch, s.hw, s.hw, s.c]);
        const filter = tf.randomNormal([s.k, s.k, s.c, s.oc]);
        return { run: kernel('Conv2D', { x, filter }, attrs), dispose: () => tf.dispose([x, filter]) };
      },
    ],
    [
      'Conv2DBackpropInput',
      (batch) => {
        const dy = tf.randomNormal([batch, oh, oh, s.oc]);
        const filter = tf.randomNormal([s.k, s.k, s.c, s.oc]);
        return {
          run: kernel('Conv2DBackpropInput', { dy, filter }, { ...attrs, inputShape: [batch, s.hw, s.hw, s.c] }),
          dispose: () => tf.dispose([dy, filter]),
        };
      },
    ],
    [
      'Conv2DBackpropFilter',
      (batch) => {
        const x = tf.randomNormal([batch, s.hw, s.hw, s.c]);
        const dy = tf.randomNormal([batch, oh, oh, s.oc]);
        return {
          run: kernel('Conv2DBackpropFilter', { x, dy }, { ...attrs, filterShape: [s.k, s.k, s.c, s.oc] }),
          dispose: () => tf.dispose([x, dy]),
        };
      },
    ],
  ];
  return ops.map(([op, make]) => {
    // Where the addon may use Winograd (see native/dnnl/src/dnnl_ops.cc winogradCandidate).
    const minChannels = op === 'Conv2DBackpropFilter' ? 64 : 32;
    const winograd = s.k === 3 && s.stride === 1 && s.c >= minChannels && s.oc >= minChannels;
    const { native, nativeWinograd, js } = measure(s.batch, gflopPerSample, make, winograd);
    return {
      name: `${s.net} ${s.layer} ${s.c}->${s.oc} k${s.k} s${s.stride} @${s.hw}x${s.hw}`,
      op,
      shape,
      gflop: gflopPerSample * s.batch,
      native,
      ...(nativeWinograd ? { nativeWinograd } : {}),
      js,
      speedup: (js.gflops ?? 0) > 0 ? (native.gflops ?? 0) / (js.gflops ?? 1) : 0,
    };
  });
}

/** Memory-bound kernels at tiny-ResNet activation size: GB/s of the bytes read and written. */
function memoryRows(): Row[] {
  const shape = [256, 28, 28, 32];
  const n = shape.reduce((a, b) => a * b, 1);
  const mb = (passes: number) => (passes * n * 4) / 1e6;
  const cases: Array<[string, string, number, (batch: number) => { run: () => void; dispose: () => void }]> = [
    [
      'add per-channel bias [N,H,W,C] + [C]',
      'Add',
      3,
      (batch) => {
        const x = tf.randomNormal([batch, 28, 28, 32]);
        const b = tf.randomNormal([32]);
        return { run: kernel('Add', { a: x, b }, {}), dispose: () => tf.dispose([x, b]) };
      },
    ],
    [
      'sum over N,H,W',
      'Sum',
      1,
      (batch) => {
        const x = tf.randomNormal([batch, 28, 28, 32]);
        return { run: kernel('Sum', { x }, { axis: [0, 1, 2], keepDims: false }), dispose: () => x.dispose() };
      },
    ],
    [
      'relu',
      'Relu',
      2,
      (batch) => {
        const x = tf.randomNormal([batch, 28, 28, 32]);
        return { run: kernel('Relu', { x }, {}), dispose: () => x.dispose() };
      },
    ],
    [
      'training batch norm, forward + backward (native: fused; js: tf.moments + tf.batchNorm)',
      'batchNormTraining',
      8,
      (batch) => {
        const x = tf.randomNormal([batch, 28, 28, 32]);
        const g = tf.ones([32]);
        const b = tf.zeros([32]);
        const dy = tf.randomNormal([batch, 28, 28, 32]);
        const f = (a: Tensor, s: Tensor, o: Tensor) => batchNormTraining(a, s, o, 1e-5).y;
        return {
          run: () =>
            tf.tidy(() => {
              tf.grads(f)([x, g, b], dy);
            }),
          dispose: () => tf.dispose([x, g, b, dy]),
        };
      },
    ],
  ];
  return cases.map(([name, op, passes, make]) => {
    const { native, js } = measure(shape[0], mb(passes) / shape[0] / 1e3, make);
    // measure() computes "gflops" as units per second; here the unit is GB.
    const toGbps = (m: Measured): Measured => {
      const { gflops, gflopsBest, ...rest } = m;
      return { ...rest, gbps: gflops, ...(gflopsBest != null ? { gbpsBest: gflopsBest } : {}) } as Measured;
    };
    return {
      name,
      op,
      shape: { tensor: shape },
      mbytes: mb(passes),
      native: toGbps(native),
      js: toGbps(js),
      speedup: (js.gflops ?? 0) > 0 ? (native.gflops ?? 0) / (js.gflops ?? 1) : 0,
    };
  });
}

const TINY: ConvShape[] = [
  { net: 'tiny_resnet b256', layer: 'conv1', batch: 256, hw: 28, c: 1, oc: 32, k: 3, stride: 1 },
  { net: 'tiny_resnet b256', layer: 'layer1', batch: 256, hw: 28, c: 32, oc: 32, k: 3, stride: 1 },
  { net: 'tiny_resnet b256', layer: 'layer2.conv1', batch: 256, hw: 28, c: 32, oc: 64, k: 3, stride: 2 },
  { net: 'tiny_resnet b256', layer: 'layer2.conv2', batch: 256, hw: 14, c: 64, oc: 64, k: 3, stride: 1 },
  { net: 'tiny_resnet b256', layer: 'layer2.downsample', batch: 256, hw: 28, c: 32, oc: 64, k: 1, stride: 2 },
  { net: 'tiny_resnet b256', layer: 'layer3.conv1', batch: 256, hw: 14, c: 64, oc: 128, k: 3, stride: 2 },
  { net: 'tiny_resnet b256', layer: 'layer3.conv2', batch: 256, hw: 7, c: 128, oc: 128, k: 3, stride: 1 },
];

const RESNET18: ConvShape[] = [
  { net: 'resnet18-cifar b64', layer: 'conv1', batch: 64, hw: 32, c: 3, oc: 64, k: 3, stride: 1 },
  { net: 'resnet18-cifar b64', layer: 'layer1', batch: 64, hw: 32, c: 64, oc: 64, k: 3, stride: 1 },
  { net: 'resnet18-cifar b64', layer: 'layer2.0.conv1', batch: 64, hw: 32, c: 64, oc: 128, k: 3, stride: 2 },
  { net: 'resnet18-cifar b64', layer: 'layer2', batch: 64, hw: 16, c: 128, oc: 128, k: 3, stride: 1 },
  { net: 'resnet18-cifar b64', layer: 'layer3.0.conv1', batch: 64, hw: 16, c: 128, oc: 256, k: 3, stride: 2 },
  { net: 'resnet18-cifar b64', layer: 'layer3', batch: 64, hw: 8, c: 256, oc: 256, k: 3, stride: 1 },
  { net: 'resnet18-cifar b64', layer: 'layer4.0.conv1', batch: 64, hw: 8, c: 256, oc: 512, k: 3, stride: 2 },
  { net: 'resnet18-cifar b64', layer: 'layer4', batch: 64, hw: 4, c: 512, oc: 512, k: 3, stride: 1 },
  { net: 'resnet18-cifar b64', layer: 'layer4.0.downsample', batch: 64, hw: 8, c: 256, oc: 512, k: 1, stride: 2 },
];

async function main(): Promise<void> {
  const info = await initEngine('cpu');
  if (!info.nativeKernels) {
    throw new Error(`native kernels are not available (${nativeAddonPath()}): ${nativeKernelsError()}; run npm run build:native`);
  }
  const threads = nativeThreads();
  const m = machine(threads);
  const log = (row: Row) => {
    const n = row.native;
    const j = row.js;
    const wino = row.nativeWinograd?.gflops != null ? `, winograd ${row.nativeWinograd.gflops.toFixed(1)}` : '';
    const rate =
      n.gflops != null ? `${n.gflops.toFixed(1)} GFLOP/s (js ${j.gflops?.toFixed(2)}${wino})` : `${n.gbps?.toFixed(1)} GB/s (js ${j.gbps?.toFixed(2)})`;
    console.log(`${row.name.padEnd(52)} ${row.op.padEnd(21)} native ${n.ms.toFixed(1).padStart(8)} ms  ${rate}  x${row.speedup.toFixed(0)}`);
  };
  console.log(
    `ssl-zoo kernel benchmark: oneDNN ${oneDnnVersion()}, ${threads} thread(s), ${m.cpuModel}, ` +
      `peak ~${m.peakGflops.toFixed(0)} GFLOP/s (${m.ghzMeasured?.toFixed(2)} GHz x ${m.flopsPerCycle} x ${threads}), load ${m.loadAverage.join(' ')}`,
  );
  const rows: Row[] = [];
  const add = (r: Row) => {
    if (r.native.gflops != null) r.fractionOfPeak = Math.round((r.native.gflops / m.peakGflops) * 1000) / 1000;
    rows.push(r);
    log(r);
  };
  for (const n of [256, 512, 1024]) add(matmulRow(n));
  for (const s of [...TINY, ...RESNET18]) for (const r of convRows(s)) add(r);
  for (const r of memoryRows()) add(r);

  const conv = rows.filter((r) => r.op.startsWith('Conv2D'));
  type Key = 'native' | 'nativeBest' | 'wino' | 'winoBest' | 'js';
  const msOf = (key: Key, r: Row) => {
    const wino = r.nativeWinograd ?? r.native;
    switch (key) {
      case 'native':
        return r.native.ms;
      case 'nativeBest':
        return r.native.msBest;
      case 'wino':
        return wino.ms;
      case 'winoBest':
        return wino.msBest;
      default:
        return ((r.gflop ?? 0) / (r.js.gflops ?? 1)) * 1e3;
    }
  };
  const totalMs = (key: Key, net: string) => Math.round(conv.filter((r) => r.name.startsWith(net)).reduce((s, r) => s + msOf(key, r), 0) * 10) / 10;
  const summary = {
    matmul1024Gflops: rows.find((r) => r.name === 'matmul 1024x1024x1024')?.native.gflops,
    convNativeGflopsMedian: median(conv.map((r) => r.native.gflops ?? 0)),
    convJsGflopsMedian: median(conv.map((r) => r.js.gflops ?? 0)),
    tinyResnetConvMsPerStep: Object.fromEntries((['native', 'nativeBest', 'wino', 'winoBest', 'js'] as Key[]).map((k) => [k, totalMs(k, 'tiny_resnet')])),
    resnet18ConvMsPerStep: Object.fromEntries((['native', 'nativeBest', 'wino', 'winoBest', 'js'] as Key[]).map((k) => [k, totalMs(k, 'resnet18')])),
    note:
      'conv ms per step: the sum over the listed layers of forward + both backward kernels, each layer once ' +
      '(median and best call; wino: with Winograd allowed (the default) where it applies; native: direct; js: estimated from the JS GFLOP/s) ' +
      '(the real nets repeat some layers; conv1 needs no backprop-input). ' +
      'Timings are wall-clock: with other processes on the same cores (see loadAverage) they are noisy.',
  };
  const result = { bench: 'kernels', onednn: oneDnnVersion(), machine: m, summary, results: rows };
  const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
  mkdirSync(join(root, 'bench-results'), { recursive: true });
  writeFileSync(join(root, 'bench-results', 'kernels.json'), `${JSON.stringify(result, null, 2)}\n`);
  console.log(JSON.stringify(result));
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.floor(s.length / 2)] : 0;
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
