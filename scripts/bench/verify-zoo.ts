/**
 * `npm run bench:verify-zoo`: `ssl-train verify --method M --devices W --seed S` with all other
 * defaults (tiny_resnet, batch 256 or the largest multiple of W below it, 3 steps), for every
 * registered method (or `--methods a,b`), W in `--devices` (default 2,3) and S in `--seeds`
 * (default 0), one after the other. Writes bench-results/<--report, default verify-zoo>.json
 * after every run (a long measurement keeps what it finished): per run the outcome, the worst
 * difference-to-bound ratio, the largest ratio of the queue column (queue methods), the
 * decisions that switched within round-off and those beyond it (methods with decisions), the
 * ReLU branches near zero that switched (several ranks) and the wall time; per method and W the
 * worst ratio over the seeds, the seeds that failed and those killed before a verdict (a rank
 * or verify itself ended by a signal: SIGKILL is most often the out-of-memory killer, so such
 * a run says nothing about the method and is run again with less beside it); the CPU it ran on.
 * Exits 1 if any run did not pass. `--one-process-ranks N` (default 1) spreads the reference and its twins over N ranks
 * (at most W): the same result bit for bit (tests/verify/one-process.test.ts), sooner on several
 * cores, with N ranks each holding a one-process model.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import { BUILT_IN_METHODS } from '../../src/methods/registry.js';
import { flag, writeReport } from './common.js';
import { runLine, seedsTable, verifyRun, type VerifyRun } from './verify-outcome.js';

const CLI = fileURLToPath(new URL('../../src/cli/bin.js', import.meta.url));

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
        const run = verifyRun(
          method,
          w,
          seed,
          {
            status: r.status,
            signal: r.signal,
            stdout: r.stdout ?? '',
            stderr: r.stderr ?? '',
            timedOut: (r.error as NodeJS.ErrnoException | undefined)?.code === 'ETIMEDOUT',
          },
          (Date.now() - start) / 1000,
        );
        runs.push(run);
        process.stderr.write(`${runLine(run)}\n`);
        writeReport(report, { cpu, oneProcessRanks, seedsTable: seedsTable(runs), runs, passed: runs.every((x) => x.passed) });
      }
    }
  }
  if (!runs.every((r) => r.passed)) process.exitCode = 1;
}

main();
