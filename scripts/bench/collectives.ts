/**
 * `npm run bench:collectives`: all-reduce (sum) and all-gather through ssl-zoo's Gloo
 * process group, 1 KiB … 64 MiB (powers of 4), 2 and 4 ranks as separate processes on
 * loopback, against PyTorch's gloo backend (`/usr/bin/python3` with python3-torch, or
 * `$SSL_ZOO_TORCH_PYTHON`) on the same sizes in the same invocation.
 *
 * Method (identical for both): barrier, then time one collective; an iteration's time is the
 * maximum over ranks; report the median over iterations. The two implementations alternate
 * for `--rounds` rounds (default 2) and each keeps its best round per size (shared machines
 * drift). Sizes are the bytes of the reduced
 * buffer (all-reduce) or of the gathered output (all-gather, W·n floats). Bus bandwidth as in
 * nccl-tests: all-reduce bytes/t · 2(W-1)/W, all-gather bytes/t · (W-1)/W.
 *
 * Flags: `--quick` (sizes up to 1 MiB), `--no-torch`, `--world-sizes 2,4`, `--rounds 2`.
 * Prints one JSON object as the last stdout line and writes bench-results/collectives.json.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createProcessGroup, loadGlooAddon } from '../../src/distributed/gloo.js';

type Op = 'allreduce' | 'allgather';
const OPS: Op[] = ['allreduce', 'allgather'];

interface Config {
  ops: Op[];
  sizes: number[];
  iters: number[];
  warmup: number[];
}

interface RawResult {
  op: Op;
  bytes: number;
  /** Seconds per iteration (max over ranks). */
  times: number[];
}

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..', '..');
const torchScript = join(root, 'scripts', 'bench', 'collectives_torch.py');

function makeConfig(quick: boolean): Config {
  const sizes: number[] = [];
  for (let bytes = 1024; bytes <= (quick ? 1 << 20 : 64 << 20); bytes *= 4) sizes.push(bytes);
  return {
    ops: OPS,
    sizes,
    // About 128 MiB moved per size, between 3 and 50 timed iterations.
    iters: sizes.map((b) => Math.max(3, Math.min(50, Math.round((128 << 20) / b)))),
    warmup: sizes.map((b) => (b >= 16 << 20 ? 1 : 3)),
  };
}

// ---------------------------------------------------------------------------------------
// Worker (one per rank)

async function worker(rank: number, worldSize: number, dir: string, config: Config): Promise<void> {
  const group = await createProcessGroup({
    rank,
    worldSize,
    rendezvous: pathToFileURL(join(dir, 'store')).href,
    timeoutMs: 300_000,
  });
  const results: RawResult[] = [];
  for (const op of config.ops) {
    config.sizes.forEach((bytes, k) => {
      const iters = config.iters[k]!;
      const warmup = config.warmup[k]!;
      const data = new Float32Array(op === 'allreduce' ? bytes / 4 : bytes / 4 / worldSize).fill(1);
      const times = new Float32Array(iters);
      for (let it = 0; it < warmup + iters; it++) {
        group.barrier();
        const start = process.hrtime.bigint();
        if (op === 'allreduce') group.allReduce(data, 'sum');
        else group.allGather(data);
        const ms = Number(process.hrtime.bigint() - start) / 1e6;
        if (it >= warmup) times[it - warmup] = ms;
      }
      group.allReduce(times, 'max');
      results.push({ op, bytes, times: Array.from(times, (ms) => ms / 1e3) });
    });
  }
  group.close();
  if (rank === 0) console.log(JSON.stringify(results));
}

// ---------------------------------------------------------------------------------------
// Driver

function runAll(commands: Array<{ cmd: string; args: string[]; env?: NodeJS.ProcessEnv }>, label: string, killAfterMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    let pending = commands.length;
    let rank0 = '';
    const errors: string[] = [];
    const children = commands.map(({ cmd, args, env }, rank) => {
      const child = spawn(cmd, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      child.stdout.on('data', (c: Buffer) => (out += c.toString()));
      child.stderr.on('data', (c: Buffer) => (err += c.toString()));
      child.on('error', (e) => errors.push(`${label} rank ${rank}: ${e.message}`));
      child.on('close', (code, signal) => {
        if (code !== 0) errors.push(`${label} rank ${rank} exited with ${code ?? signal}:\n${err.trim().split('\n').slice(-8).join('\n')}`);
        if (rank === 0) rank0 = out;
        if (--pending === 0) {
          clearTimeout(timer);
          if (errors.length) reject(new Error(errors.join('\n')));
          else resolve(rank0);
        }
      });
      return child;
    });
    const timer = setTimeout(() => {
      errors.push(`${label}: killed after ${killAfterMs} ms`);
      for (const c of children) c.kill('SIGKILL');
    }, killAfterMs);
  });
}

function lastLine(text: string): string {
  return text.trim().split('\n').pop() ?? '';
}

function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

function summarize(r: RawResult, worldSize: number) {
  const seconds = median(r.times);
  const factor = r.op === 'allreduce' ? (2 * (worldSize - 1)) / worldSize : (worldSize - 1) / worldSize;
  return {
    iters: r.times.length,
    medianMs: +(seconds * 1e3).toFixed(4),
    algGBps: +(r.bytes / seconds / 1e9).toFixed(4),
    busGBps: +((r.bytes / seconds / 1e9) * factor).toFixed(4),
  };
}

function formatBytes(bytes: number): string {
  return bytes >= 1 << 20 ? `${bytes / (1 << 20)} MiB` : `${bytes / 1024} KiB`;
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  if (argv[0] === '--worker') {
    const [, rank, worldSize, dir, config] = argv;
    await worker(Number(rank), Number(worldSize), dir!, JSON.parse(config!) as Config);
    return;
  }
  const quick = argv.includes('--quick');
  const wsFlag = argv.indexOf('--world-sizes');
  const worldSizes = wsFlag >= 0 ? argv[wsFlag + 1]!.split(',').map(Number) : [2, 4];
  const roundsFlag = argv.indexOf('--rounds');
  const rounds = roundsFlag >= 0 ? Math.max(1, Number(argv[roundsFlag + 1])) : 2;
  const python = process.env.SSL_ZOO_TORCH_PYTHON || '/usr/bin/python3';
  let torchSkipped: string | undefined = argv.includes('--no-torch') ? 'disabled with --no-torch' : undefined;
  if (!torchSkipped && !existsSync(python)) torchSkipped = `${python} not found`;
  const addon = loadGlooAddon();
  const config = makeConfig(quick);
  const script = fileURLToPath(import.meta.url);

  const rows: Array<Record<string, unknown>> = [];
  const started = Date.now();
  for (const W of worldSizes) {
    const dir = mkdtempSync(join(tmpdir(), 'ssl-zoo-bench-collectives-'));
    try {
      // Alternate the two implementations round by round so that load drift on a shared
      // machine hits both alike; keep each implementation's best round per size.
      const oursRounds: RawResult[][] = [];
      const theirsRounds: RawResult[][] = [];
      for (let round = 0; round < rounds; round++) {
        console.error(`ssl-zoo gloo, ${W} ranks, round ${round + 1}/${rounds} ...`);
        oursRounds.push(
          JSON.parse(
            lastLine(
              await runAll(
                Array.from({ length: W }, (_, r) => ({
                  cmd: process.execPath,
                  args: [script, '--worker', String(r), String(W), join(dir, `store-${round}`), JSON.stringify(config)],
                })),
                `ssl-zoo W=${W}`,
                600_000,
              ),
            ),
          ) as RawResult[],
        );
        if (torchSkipped) continue;
        console.error(`PyTorch gloo, ${W} ranks, round ${round + 1}/${rounds} ...`);
        try {
          theirsRounds.push(
            JSON.parse(
              lastLine(
                await runAll(
                  Array.from({ length: W }, (_, r) => ({
                    cmd: python,
                    args: [torchScript, String(r), String(W), join(dir, `torch-store-${round}`), JSON.stringify(config)],
                    env: { GLOO_SOCKET_IFNAME: 'lo', OMP_NUM_THREADS: '1' },
                  })),
                  `torch W=${W}`,
                  600_000,
                ),
              ),
            ) as RawResult[],
          );
        } catch (err) {
          torchSkipped = `PyTorch reference failed: ${(err as Error).message.split('\n').slice(0, 6).join(' | ')}`;
          console.error(torchSkipped);
        }
      }
      const best = (runs: RawResult[][], op: Op, bytes: number): RawResult | undefined =>
        runs
          .map((results) => results.find((x) => x.op === op && x.bytes === bytes))
          .filter((x): x is RawResult => x !== undefined)
          .sort((a, b) => median(a.times) - median(b.times))[0];
      for (const op of config.ops) {
        for (const bytes of config.sizes) {
          const sslZoo = summarize(best(oursRounds, op, bytes)!, W);
          const t = torchSkipped ? undefined : best(theirsRounds, op, bytes);
          const torch = t ? summarize(t, W) : undefined;
          const row = {
            op,
            worldSize: W,
            bytes,
            size: formatBytes(bytes),
            sslZoo,
            torch: torch ?? null,
            // ssl-zoo time / PyTorch time: below 1 means ssl-zoo is faster.
            timeRatio: torch ? +(sslZoo.medianMs / torch.medianMs).toFixed(3) : null,
          };
          rows.push(row);
          console.error(
            `${op.padEnd(9)} W=${W} ${formatBytes(bytes).padStart(8)}  ssl-zoo ${sslZoo.medianMs.toFixed(3).padStart(9)} ms ${sslZoo.busGBps.toFixed(3).padStart(7)} GB/s` +
              (torch ? `   torch ${torch.medianMs.toFixed(3).padStart(9)} ms ${torch.busGBps.toFixed(3).padStart(7)} GB/s   ratio ${row.timeRatio}` : ''),
          );
        }
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  const largest = config.sizes[config.sizes.length - 1]!;
  const headline = Object.fromEntries(
    rows
      .filter((r) => r.bytes === largest)
      .map((r) => [
        `${r.op}_${formatBytes(largest).replace(' ', '')}_W${r.worldSize}`,
        { sslZooMs: (r.sslZoo as { medianMs: number }).medianMs, torchMs: (r.torch as { medianMs: number } | null)?.medianMs ?? null, timeRatio: r.timeRatio },
      ]),
  );
  const report = {
    benchmark: 'collectives',
    date: new Date().toISOString(),
    environment: {
      node: process.version,
      cpus: cpus().length,
      cpuModel: cpus()[0]?.model,
      glooVersion: addon.glooVersion,
      torchPython: torchSkipped ? null : python,
      transport: 'Gloo TCP on loopback (127.0.0.1), one process per rank',
    },
    method:
      'barrier, then time one collective; per-iteration time = max over ranks; median over iterations; ' +
      'implementations alternate over rounds, best round per size kept. ' +
      'allgather size = gathered output bytes. busGBps: allreduce x2(W-1)/W, allgather x(W-1)/W. timeRatio = ssl-zoo / PyTorch.',
    quick,
    rounds,
    torchSkipped: torchSkipped ?? null,
    headline,
    results: rows,
    wallSeconds: Math.round((Date.now() - started) / 1000),
  };
  const outDir = join(root, 'bench-results');
  mkdirSync(outDir, { recursive: true });
  writeFileSync(join(outDir, 'collectives.json'), `${JSON.stringify(report, null, 2)}\n`);
  console.log(JSON.stringify(report));
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
