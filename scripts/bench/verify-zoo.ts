/**
 * `npm run bench:verify-zoo`: `ssl-train verify --method M --devices W` with all other
 * defaults (tiny_resnet, batch 256 or the largest multiple of W below it, 3 steps), for
 * every registered method (or `--methods a,b`) and W in `--devices` (default 2,3), one after
 * the other. Writes bench-results/verify-zoo.json: per run the outcome, the worst
 * difference-to-bound ratio, the largest ratio of the queue column (queue methods) and the
 * wall time, with the CPU it ran on. Exits 1 if any run failed.
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
  passed: boolean;
  /** The worst difference / bound over steps and kinds (passes at <= 1). */
  worst: number | null;
  /** The worst queue difference / bound, for methods with queues. */
  worstQueue: number | null;
  seconds: number;
  /** The last lines of the output when the run did not pass. */
  output?: string;
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

function main(): void {
  const methods = flag('methods', BUILT_IN_METHODS.join(',')).split(',').filter(Boolean);
  const devices = flag('devices', '2,3').split(',').map(Number);
  const runs: VerifyRun[] = [];
  for (const method of methods) {
    for (const w of devices) {
      const start = Date.now();
      const r = spawnSync(process.execPath, [CLI, 'verify', '--method', method, '--devices', String(w)], { encoding: 'utf8', timeout: 1_800_000 });
      const seconds = (Date.now() - start) / 1000;
      const worst = /the worst difference is ([0-9.]+|Infinity) of its bound/.exec(r.stdout ?? '');
      const run: VerifyRun = {
        method,
        devices: w,
        passed: r.status === 0 && /PASSED/.test(r.stdout ?? ''),
        worst: worst ? Number(worst[1]) : null,
        worstQueue: worstQueueRatio(r.stdout ?? ''),
        seconds: Math.round(seconds),
      };
      if (!run.passed) run.output = `${r.stdout ?? ''}${r.stderr ?? ''}`.split('\n').slice(-15).join('\n');
      runs.push(run);
      process.stderr.write(
        `${method} --devices ${w}: ${run.passed ? 'PASSED' : 'FAILED'} worst ${run.worst ?? '?'}${run.worstQueue !== null ? `, queues ${run.worstQueue.toFixed(2)}` : ''} (${run.seconds} s)\n`,
      );
    }
  }
  const flags = readFileSync('/proc/cpuinfo', 'utf8');
  const isa = /\bamx_tile\b/.test(flags) ? 'AMX' : /\bavx512f\b/.test(flags) ? 'AVX-512' : 'AVX2';
  const cpu = `${cpus()[0]?.model.trim()} (${isa}, ${cpus().length} cores), ONEDNN_MAX_CPU_ISA=${process.env.ONEDNN_MAX_CPU_ISA ?? 'unset'}`;
  writeReport('verify-zoo', { cpu, runs, passed: runs.every((r) => r.passed) });
  if (!runs.every((r) => r.passed)) process.exitCode = 1;
}

main();
