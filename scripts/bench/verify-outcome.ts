/**
 * What `bench:verify-zoo` reads from one `ssl-train verify` run (its exit status or signal,
 * stdout and stderr), and the seeds table over runs. A run ended by a signal, or with a rank
 * killed by one, has no verdict: SIGKILL is most often the kernel's out-of-memory killer, and
 * such a run is counted apart from the failures.
 */

/** How one verify run ended, as `spawnSync` returns it. */
export interface VerifyProcessResult {
  status: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  /** Stopped by the caller's time limit (then `signal` is the one it sent). */
  timedOut?: boolean;
}

export interface VerifyRun {
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
  /** How the run ended before its verdict ("rank 0 killed by SIGKILL"): not a failure of the check. */
  killed?: string;
  /** The last lines of the output when the run did not pass. */
  output?: string;
}

/** Per method and world size: the worst ratio over the seeds measured, the seeds that failed and those killed before a verdict. */
export interface SeedsRow {
  method: string;
  devices: number;
  seeds: number[];
  worst: number | null;
  failedSeeds: number[];
  killedSeeds: number[];
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

export function seedsTable(runs: VerifyRun[]): SeedsRow[] {
  const rows = new Map<string, SeedsRow>();
  for (const r of runs) {
    const key = `${r.method}:${r.devices}`;
    const row = rows.get(key) ?? { method: r.method, devices: r.devices, seeds: [], worst: 0, failedSeeds: [], killedSeeds: [] };
    row.seeds.push(r.seed);
    row.worst = row.worst === null || r.worst === null ? null : Math.max(row.worst, r.worst);
    if (r.killed) row.killedSeeds.push(r.seed);
    else if (!r.passed) row.failedSeeds.push(r.seed);
    rows.set(key, row);
  }
  return [...rows.values()];
}

/** The run of `method` on `devices` ranks with `seed` from its process result and wall time. */
export function verifyRun(method: string, devices: number, seed: number, r: VerifyProcessResult, seconds: number): VerifyRun {
  const worst = /the worst difference is ([0-9.]+|Infinity) of its bound/.exec(r.stdout);
  const run: VerifyRun = {
    method,
    devices,
    seed,
    passed: r.status === 0 && /PASSED/.test(r.stdout),
    worst: worst ? Number(worst[1]) : null,
    worstQueue: worstQueueRatio(r.stdout),
    switched: switchedDecisions(r.stdout),
    decisionFailures: Number(/of its bound: (\d+) \S+ decision\(s\) differ/.exec(r.stdout)?.[1] ?? 0),
    branchesSwitched: switchedBranches(r.stdout),
    seconds: Math.round(seconds),
  };
  const killedRank = /rank (\d+) failed: killed by (SIG[A-Z0-9]+)/.exec(r.stderr);
  if (r.timedOut) run.killed = `verify stopped at its time limit by ${r.signal}`;
  else if (r.signal) run.killed = `verify killed by ${r.signal}`;
  else if (killedRank) run.killed = `rank ${killedRank[1]} killed by ${killedRank[2]}`;
  if (!run.passed) run.output = `${r.stdout}${r.stderr}`.split('\n').slice(-15).join('\n');
  return run;
}

/** One line per run: the outcome, the worst ratio and the switches. */
export function runLine(run: VerifyRun): string {
  const outcome = run.killed ? `KILLED before a verdict (${run.killed})` : run.passed ? 'PASSED' : 'FAILED';
  return (
    `${run.method} --devices ${run.devices} --seed ${run.seed}: ${outcome} worst ${run.worst ?? '?'}` +
    `${run.worstQueue !== null ? `, queues ${run.worstQueue.toFixed(2)}` : ''}${run.switched !== null ? `, ${run.switched} decision(s) switched` : ''}` +
    `${run.branchesSwitched !== null ? `, ${run.branchesSwitched} ReLU branch(es) switched` : ''} (${run.seconds} s)`
  );
}
