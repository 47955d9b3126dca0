import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { invalidValue, UserError } from '../core/errors.js';
import { signalExitCode, STOP_LISTENING_MESSAGE, STOP_MESSAGE, STOP_SIGNALS } from '../trainer/stop-signal.js';

/** Where a worker process sits in the job (torchrun's variables). */
export interface WorkerEnv {
  rank: number;
  localRank: number;
  worldSize: number;
  localWorldSize: number;
  /** Rendezvous URL (`file://`, `tcp://`, `redis://` or `env://`). */
  rendezvous: string;
}

/** The environment variable carrying the rendezvous URL to the workers. */
export const RENDEZVOUS_ENV = 'SSL_ZOO_RENDEZVOUS';

function intVar(env: NodeJS.ProcessEnv, name: string): number | undefined {
  const raw = env[name];
  if (raw === undefined || raw === '') return undefined;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0) throw invalidValue(name, raw, 'a non-negative integer');
  return n;
}

/** Slurm's reserved step ids (batch script, extern, interactive, pending, ...): not an srun task launch. */
const SLURM_SPECIAL_STEP_IDS = 0xfffffff0;

/**
 * `SLURM_STEP_TASKS_PER_NODE` (e.g. `2(x3),1`) expanded and indexed by `SLURM_NODEID`:
 * the tasks of this step on this node. Undefined when absent or unreadable.
 */
function slurmTasksOnThisNode(env: NodeJS.ProcessEnv): number | undefined {
  const raw = env.SLURM_STEP_TASKS_PER_NODE;
  if (!raw) return undefined;
  const counts: number[] = [];
  for (const part of raw.split(',')) {
    const m = /^(\d+)(?:\(x(\d+)\))?$/.exec(part.trim());
    if (!m) return undefined;
    for (let i = 0; i < Number(m[2] ?? 1); i++) counts.push(Number(m[1]));
  }
  return counts[intVar(env, 'SLURM_NODEID') ?? 0];
}

/**
 * Whether this process is one task of a multi-task `srun` step (and so a worker). Slurm
 * sets `SLURM_NTASKS` and `SLURM_PROCID` in an sbatch batch script too (the script is task
 * 0 of the batch step), where `ssl-train --devices N` must launch its own workers; only
 * srun sets the step variables. The rule: `SLURM_PROCID` is set, the job step id
 * (`SLURM_STEP_ID`, or the older `SLURM_STEPID`) is set and is a real step (not one of
 * Slurm's reserved ids for the batch script, extern or interactive steps), and the step
 * has more than one task (`SLURM_STEP_NUM_TASKS`, else `SLURM_NTASKS`). A one-task step
 * (`srun -n 1 ssl-train --devices 4`, `srun --pty bash`) is not a worker either: it runs
 * the launcher. (PyTorch Lightning's rule, `SLURM_NTASKS` set and a job name other than
 * `bash`/`interactive`, also fires inside an sbatch script that calls the program without
 * srun.)
 */
export function isSlurmTask(env: NodeJS.ProcessEnv = process.env): boolean {
  // Detection only: a malformed value means "not an srun task" (workerEnv reports bad ones).
  const soft = (name: string): number | undefined => {
    const n = Number(env[name] ?? '');
    return env[name] && Number.isInteger(n) && n >= 0 ? n : undefined;
  };
  if (soft('SLURM_PROCID') === undefined) return false;
  const step = soft('SLURM_STEP_ID') ?? soft('SLURM_STEPID');
  if (step === undefined || step >= SLURM_SPECIAL_STEP_IDS) return false;
  const tasks = soft('SLURM_STEP_NUM_TASKS') ?? soft('SLURM_NTASKS');
  return tasks !== undefined && tasks > 1;
}

/**
 * The worker identity set by a launcher: ours or torchrun's (RANK, LOCAL_RANK, WORLD_SIZE,
 * LOCAL_WORLD_SIZE, with MASTER_ADDR/MASTER_PORT or SSL_ZOO_RENDEZVOUS) or an srun step's
 * (see {@link isSlurmTask}: SLURM_PROCID, SLURM_LOCALID, SLURM_STEP_NUM_TASKS or
 * SLURM_NTASKS, with MASTER_ADDR/PORT or SSL_ZOO_RENDEZVOUS). Undefined when this process
 * was not launched as a worker.
 */
export function workerEnv(env: NodeJS.ProcessEnv = process.env): WorkerEnv | undefined {
  const torchrun = intVar(env, 'WORLD_SIZE') !== undefined && intVar(env, 'RANK') !== undefined;
  const slurm = !torchrun && isSlurmTask(env);
  if (!torchrun && !slurm) return undefined;
  const worldSize = (torchrun ? intVar(env, 'WORLD_SIZE') : (intVar(env, 'SLURM_STEP_NUM_TASKS') ?? intVar(env, 'SLURM_NTASKS'))) as number;
  const rank = (torchrun ? intVar(env, 'RANK') : intVar(env, 'SLURM_PROCID')) as number;
  const localRank = (torchrun ? intVar(env, 'LOCAL_RANK') : intVar(env, 'SLURM_LOCALID')) ?? 0;
  const localWorldSize = (torchrun ? intVar(env, 'LOCAL_WORLD_SIZE') : (slurmTasksOnThisNode(env) ?? intVar(env, 'SLURM_NTASKS_PER_NODE'))) ?? worldSize;
  if (worldSize < 1 || rank >= worldSize) throw invalidValue('RANK', rank, `an integer in [0, ${worldSize - 1}] (WORLD_SIZE=${worldSize})`);
  const rendezvous = env[RENDEZVOUS_ENV] ?? (env.MASTER_ADDR && env.MASTER_PORT ? 'env://' : undefined);
  if (!rendezvous) {
    throw new UserError(`rendezvous: worker ${rank} of ${worldSize} has neither ${RENDEZVOUS_ENV} nor MASTER_ADDR/MASTER_PORT; set one`);
  }
  return { rank, localRank, worldSize, localWorldSize, rendezvous };
}

export interface LaunchOptions {
  /** Processes on this node. */
  nprocs: number;
  numNodes: number;
  nodeRank: number;
  /** Required for several nodes (`file:///shared/dir`, `tcp://host:port`, `redis://host:port`); default a fresh file store. */
  rendezvous?: string;
  /** The script and arguments every worker runs (typically this CLI's own argv). */
  script: string;
  args: string[];
  /** Extra environment per local rank (e.g. CUDA_VISIBLE_DEVICES). */
  envFor?: (localRank: number) => NodeJS.ProcessEnv;
  /** How long to wait after asking the other workers to stop before killing them. */
  killAfterMs?: number;
  /**
   * After forwarding a stop signal (SIGINT, SIGTERM, SIGUSR1) to the workers, how long to wait
   * for them to save their checkpoint and exit before killing them (the run's `--timeout`;
   * default 300 s).
   */
  stopTimeoutMs?: number;
}

/**
 * Spawns `nprocs` workers of this node (ranks nodeRank·nprocs + i) with torchrun's
 * variables and the rendezvous URL, splits the cores between them (SSL_ZOO_NUM_THREADS /
 * OMP_NUM_THREADS = cores / nprocs unless set), and waits. Global rank 0 prints to this
 * terminal; the others' output is kept and shown if they fail. When a worker fails, the
 * others are stopped and 2 (its user error) or 1 is returned, with one report of how it
 * ended (see {@link failureReport}). Resolves to 0 when every worker succeeds.
 *
 * SIGINT, SIGTERM and SIGUSR1 are forwarded to the workers, which stop gracefully (a
 * checkpoint at the step they agree on; see src/trainer/stop-signal.ts); after
 * `stopTimeoutMs` the ones still running are killed. It then resolves to 128 + the first
 * signal's number (130, 143, 138), as do workers that a signal stopped without the launcher
 * (one sent to a rank directly). The first signal is forwarded as a message on the IPC
 * channel of each worker that listens for it ({@link STOP_MESSAGE}: training has installed its
 * handlers; others get the signal itself), not as a signal: Ctrl-C in a terminal, or a Slurm
 * signal to every process of a step, reaches the workers directly too, and a worker takes a
 * second signal as "stop at once". Further signals are forwarded as themselves. (The workers
 * stay in the terminal's process group, so that such signals still reach them if the
 * launcher is gone.)
 */
export async function launchWorkers(options: LaunchOptions): Promise<number> {
  const { nprocs, numNodes, nodeRank } = options;
  const worldSize = nprocs * numNodes;
  if (numNodes > 1 && !options.rendezvous) {
    throw new UserError('--rendezvous: required with --num-nodes > 1 (file:///shared/dir, tcp://host:port or redis://host:port)');
  }
  if (nodeRank >= numNodes) throw invalidValue('--node-rank', nodeRank, `an integer in [0, ${numNodes - 1}]`);
  const storeDir = options.rendezvous ? undefined : mkdtempSync(join(tmpdir(), 'ssl-zoo-rendezvous-'));
  const rendezvous = options.rendezvous ?? `file://${storeDir}`;
  const threads = String(Math.max(1, Math.floor(availableParallelism() / nprocs)));
  const children: ChildProcess[] = [];
  const stderrTails: string[] = [];
  let firstFailure: { rank: number; code: number | null; signal: NodeJS.Signals | null } | undefined;
  let stopping = false;
  // The exit code of a graceful stop: 128 + the first stop signal's number, forwarded or seen in a worker's exit code.
  let interruptedCode: number | undefined;
  let stopKiller: NodeJS.Timeout | undefined;
  // The workers that take a forwarded stop signal as a message (see STOP_LISTENING_MESSAGE).
  const listening = new Set<ChildProcess>();

  const stopAll = (signal: NodeJS.Signals) => {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill(signal);
  };
  const killAfterStopTimeout = () => {
    stopKiller ??= setTimeout(() => stopAll('SIGKILL'), options.stopTimeoutMs ?? DEFAULT_STOP_TIMEOUT_MS);
  };
  const forwarders = STOP_SIGNALS.map((signal) => {
    const forward = () => {
      stopping = true;
      if (interruptedCode === undefined) {
        interruptedCode = signalExitCode(signal);
        for (const c of children) {
          if (c.exitCode !== null || c.signalCode !== null) continue;
          if (listening.has(c) && c.connected) c.send({ type: STOP_MESSAGE, signal });
          else c.kill(signal);
        }
      } else {
        stopAll(signal);
      }
      killAfterStopTimeout();
    };
    process.on(signal, forward);
    return [signal, forward] as const;
  });

  try {
    const exits = Array.from({ length: nprocs }, (_, localRank) => {
      const rank = nodeRank * nprocs + localRank;
      const env: NodeJS.ProcessEnv = {
        ...process.env,
        SSL_ZOO_NUM_THREADS: process.env.SSL_ZOO_NUM_THREADS ?? threads,
        OMP_NUM_THREADS: process.env.OMP_NUM_THREADS ?? threads,
        ...options.envFor?.(localRank),
        RANK: String(rank),
        LOCAL_RANK: String(localRank),
        WORLD_SIZE: String(worldSize),
        LOCAL_WORLD_SIZE: String(nprocs),
        GROUP_RANK: String(nodeRank),
        [RENDEZVOUS_ENV]: rendezvous,
      };
      const child = spawn(process.execPath, [...process.execArgv, options.script, ...options.args], {
        env,
        stdio: rank === 0 ? ['ignore', 'inherit', 'pipe', 'ipc'] : ['ignore', 'ignore', 'pipe', 'ipc'],
      });
      children.push(child);
      child.on('message', (m: { type?: unknown } | null) => {
        if (m?.type === STOP_LISTENING_MESSAGE) listening.add(child);
      });
      stderrTails[localRank] = '';
      child.stderr?.on('data', (chunk: Buffer) => {
        if (rank === 0) process.stderr.write(chunk);
        stderrTails[localRank] = (stderrTails[localRank] + chunk.toString()).slice(-16384);
      });
      child.on('exit', (code, signal) => {
        if (code !== null && STOP_EXIT_CODES.has(code) && !firstFailure && interruptedCode === undefined) {
          // A signal reached the workers without the launcher: they stop at the step they agreed on.
          stopping = true;
          interruptedCode = code;
          killAfterStopTimeout();
          return;
        }
        if ((code !== 0 || signal !== null) && !firstFailure && !stopping) {
          firstFailure = { rank: localRank, code, signal };
          stopping = true;
          // A training rank takes SIGTERM as a graceful stop, which cannot finish without the failed rank.
          for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill(listening.has(c) ? 'SIGKILL' : 'SIGTERM');
          const killer = setTimeout(() => stopAll('SIGKILL'), options.killAfterMs ?? 5000);
          killer.unref();
        }
      });
      // 'close' comes after the child's stderr is read to the end: its last error is in the tail.
      return new Promise<void>((resolve) => child.on('close', () => resolve()));
    });
    await Promise.all(exits);
  } finally {
    for (const [signal, forward] of forwarders) process.off(signal, forward);
    clearTimeout(stopKiller);
    if (storeDir) rmSync(storeDir, { recursive: true, force: true });
  }
  if (interruptedCode !== undefined && !firstFailure) return interruptedCode;
  if (!firstFailure) return stopping ? 1 : 0;
  const { rank: localRank, code, signal } = firstFailure;
  const rank = nodeRank * nprocs + localRank;
  const report = failureReport(rank, code, signal, stderrTails[localRank]);
  if (report) process.stderr.write(`${report}\n`);
  return code === 2 ? 2 : 1;
}

/** How long the workers have to stop after a forwarded signal, without `stopTimeoutMs`. */
const DEFAULT_STOP_TIMEOUT_MS = 300_000;

/** The exit codes of a worker that a stop signal interrupted (130, 138, 143). */
const STOP_EXIT_CODES = new Set(STOP_SIGNALS.map(signalExitCode));

/**
 * "killed by SIGTERM" or "exited with code 3". A first failure is never the launcher's own
 * doing (it signals workers only once stopping), so a SIGKILL came from outside: say what most
 * often sends one.
 */
export function describeExit(code: number | null, signal: NodeJS.Signals | null): string {
  if (signal === 'SIGKILL') return `killed by SIGKILL, not by ssl-train (most often the kernel's out-of-memory killer: \`dmesg\` names it)`;
  return signal ? `killed by ${signal}` : `exited with code ${code}`;
}

/**
 * What the launcher prints when global rank `rank` failed first (undefined: nothing).
 *
 * - A user error (exit code 2) is the rank's own one-line `ssl-train: error: ...`, as one
 *   process would print it (rank 0's output already reached the terminal).
 * - Rank 0 that ended on its own `ssl-train: error: ...` line (a failed run, e.g. stopped at
 *   a non-finite loss, exit code 1): nothing more, that line already says why.
 * - Otherwise `ssl-train: rank R failed: <how it ended>`, then, for ranks other than 0
 *   (whose stderr the terminal has not seen), `: <its last error line>` and the stack frames
 *   that follow it, if it wrote any.
 */
export function failureReport(rank: number, code: number | null, signal: NodeJS.Signals | null, stderr: string): string | undefined {
  const lines = stderr
    .split('\n')
    .map((l) => l.trimEnd())
    .filter((l) => l.trim() !== '');
  if (code === 2 && !signal) {
    if (rank === 0) return undefined;
    return lines.filter((l) => l.startsWith('ssl-train: error:')).slice(-1)[0] ?? `ssl-train: rank ${rank} failed: ${describeExit(code, signal)}`;
  }
  const header = `ssl-train: rank ${rank} failed: ${describeExit(code, signal)}`;
  if (rank === 0) return !signal && lines.at(-1)?.startsWith('ssl-train: error:') ? undefined : header;
  // The last line that is not a stack frame, and the frames under it.
  let last = lines.length - 1;
  while (last >= 0 && /^\s+at /.test(lines[last])) last--;
  if (last < 0) return header;
  const error = lines[last].replace(/^ssl-train: /, '');
  const frames = lines.slice(last + 1, last + 21);
  return [`${header}: ${error}`, ...frames].join('\n');
}
