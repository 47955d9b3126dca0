/**
 * `npm run bench:verify-zoo`: `ssl-train verify --method M --devices W --seed S` with all other
 * defaults (tiny_resnet, batch 256 or the largest multiple of W below it, 3 steps), for every
 * registered method (or `--methods a,b`), W in `--devices` (default 2,3) and S in `--seeds`
 * (default 0), one after the other. Writes bench-results/<--report, default verify-zoo>.json
 * after every run (a long measurement keeps what it finished): per run the outcome, the worst
 * difference-to-bound ratio, the largest ratio of the queue column (queue methods), the
 * decisions that switched within round-off and those beyond it (methods with decisions), the
 * ReLU branches near zero that switched (several ranks) and the wall time; per method and W the
 * worst ratio over the seeds and the seeds that failed; the CPU it ran on. Exits 1 if any run
 * failed. `--one-process-ranks N` (default 1) spreads the reference and its twins over N ranks
 * (at most W): the same result bit for bit (tests/verify/one-process.test.ts), sooner on several
 * cores, with N ranks each holding a one-process model.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import { BUILT_IN_METHODS } from '../../src/methods/registry.js';
import { flag, writeReport } from './common.js';

const CLI = fileURLToPath(new URL('../../src/cli/bin.js', import.meta.url));

interface VerifyRun {
  method: string;
  devices: number;
  seed: number;
  passed: boolean;
  /** The worst difference / bound over steps and kinds (passes at <= 1). */
  worst: number | null;
  /** The worst queue difference / bound, for methods with queues. */
  worstQueue: number | null;
  /** Decisions (nearest neighbours) that switched within round-off, summed over steps, for methods with decisions. */
  switched: number | null;
  /** Decisions that differed beyond round-off (a failure). */
  decisionFailures: number;
  /** ReLU branches near zero that switched, summed over steps (null without a ReLU branches column). */
  branchesSwitched: number | null;
  seconds: number;
  /** The last lines of the output when the run did not pass. */
  output?: string;
}

/** Per method and world size: the worst ratio over the seeds measured, and the seeds that failed. */
interface SeedsRow {
  method: string;
  devices: number;
  seeds: number[];
  worst: number | null;
  failedSeeds: number[];
}

/** The largest `difference / bound` of the queues column (the 4th `a / b` cell of each step line). */
function worstQueueRatio(stdout: string): number | null {
  if (!/ queues /.test(stdout)) return null;
  let worst = 0;
  for (const line of stdout.split('\n')) {
    const cells = [...line.matchAll(/([0-9.]+e[+-]\d+) \/ ([0-9.]+e[+-]\d+)/g)];
    if (/^\d+\s/.test(line) && cells.length >= 4) worst = Math.max(worst, Number(cells[3]![1]) / Number(cells[3]![2]));
  }
  return worst;
}

/** The decisions that differed, summed over the step lines' `k differ` cells (null without a decisions column). */
function switchedDecisions(stdout: string): number | null {
  if (!/ decisions /.test(stdout)) return null;
  let n = 0;
  for (const line of stdout.split('\n')) if (/^\d+\s/.test(line)) n += Number(/ (\d+) differ/.exec(line)?.[1] ?? 0);
  return n;
}

/** The ReLU branches that switched, summed over the step lines' `k/n switched` cells (null without that column). */
function switchedBranches(stdout: string): number | null {
  if (!/ ReLU branches /.test(stdout)) return null;
  let n = 0;
  for (const line of stdout.split('\n')) if (/^\d+\s/.test(line)) n += Number(/ (\d+)\/\d+ switched/.exec(line)?.[1] ?? 0);
  return n;
}

function seedsTable(runs: VerifyRun[]): SeedsRow[] {
  const rows = new Map<string, SeedsRow>();
  for (const r of runs) {
    const key = `${r.method}:${r.devices}`;
    const row = rows.get(key) ?? { method: r.method, devices: r.devices, seeds: [], worst: 0, failedSeeds: [] };
    row.seeds.push(r.seed);
    row.worst = row.worst === null || r.worst === null ? null : Math.max(row.worst, r.worst);
    if (!r.passed) row.failedSeeds.push(r.seed);
    rows.set(key, row);
  }
  return [...rows.values()];
}

function main(): void {
  const methods = flag('methods', BUILT_IN_METHODS.join(',')).split(',').filter(Boolean);
  const devices = flag('devices', '2,3').split(',').map(Number);
  const seeds = flag('seeds', '0').split(',').map(Number);
  const report = flag('report', 'verify-zoo');
  const oneProcessRanks = Number(flag('one-process-ranks', '1'));
  if (!Number.isInteger(oneProcessRanks) || oneProcessRanks < 1)
    throw new Error(`--one-process-ranks: expected an integer >= 1, got ${flag('one-process-ranks', '')}`);
  if (seeds.some((s) => !Number.isInteger(s) || s < 0)) throw new Error(`--seeds: expected integers >= 0 separated by commas, got ${flag('seeds', '')}`);
  const flags = readFileSync('/proc/cpuinfo', 'utf8');
  const isa = /\bamx_tile\b/.test(flags) ? 'AMX' : /\bavx512f\b/.test(flags) ? 'AVX-512' : 'AVX2';
  const cpu = `${cpus()[0]?.model.trim()} (${isa}, ${cpus().length} cores), ONEDNN_MAX_CPU_ISA=${process.env.ONEDNN_MAX_CPU_ISA ?? 'unset'}`;
  const runs: VerifyRun[] = [];
  for (const method of methods) {
    for (const w of devices) {
      for (const seed of seeds) {
        const start = Date.now();
        const args = [CLI, 'verify', '--method', method, '--devices', String(w), '--seed', String(seed)];
        if (oneProcessRanks > 1) args.push('--one-process-ranks', String(Math.min(oneProcessRanks, w)));
        const r = spawnSync(process.execPath, args, { encoding: 'utf8', timeout: 1_800_000 });
        const seconds = (Date.now() - start) / 1000;
        const stdout = r.stdout ?? '';
        const worst = /the worst difference is ([0-9.]+|Infinity) of its bound/.exec(stdout);
        const run: VerifyRun = {
          method,
          devices: w,
          seed,
          passed: r.status === 0 && /PASSED/.test(stdout),
          worst: worst ? Number(worst[1]) : null,
          worstQueue: worstQueueRatio(stdout),
          switched: switchedDecisions(stdout),
          decisionFailures: Number(/of its bound: (\d+) \S+ decision\(s\) differ/.exec(stdout)?.[1] ?? 0),
          branchesSwitched: switchedBranches(stdout),
          seconds: Math.round(seconds),
        };
        if (!run.passed) run.output = `${stdout}${r.stderr ?? ''}`.split('\n').slice(-15).join('\n');
        runs.push(run);
        process.stderr.write(
          `${method} --devices ${w} --seed ${seed}: ${run.passed ? 'PASSED' : 'FAILED'} worst ${run.worst ?? '?'}` +
            `${run.worstQueue !== null ? `, queues ${run.worstQueue.toFixed(2)}` : ''}${run.switched !== null ? `, ${run.switched} decision(s) switched` : ''}` +
            `${run.branchesSwitched !== null ? `, ${run.branchesSwitched} ReLU branch(es) switched` : ''} (${run.seconds} s)\n`,
        );
        writeReport(report, { cpu, oneProcessRanks, seedsTable: seedsTable(runs), runs, passed: runs.every((x) => x.passed) });
      }
    }
  }
  if (!runs.every((r) => r.passed)) process.exitCode = 1;
}

main();
