import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { invalidValue, UserError } from '../core/errors.js';

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

/**
 * The worker identity set by a launcher: ours or torchrun's (RANK, LOCAL_RANK, WORLD_SIZE,
 * LOCAL_WORLD_SIZE, with MASTER_ADDR/MASTER_PORT or SSL_ZOO_RENDEZVOUS) or SLURM's
 * (SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, SLURM_NTASKS_PER_NODE, with MASTER_ADDR/PORT
 * or SSL_ZOO_RENDEZVOUS). Undefined when this process was not launched as a worker.
 */
export function workerEnv(env: NodeJS.ProcessEnv = process.env): WorkerEnv | undefined {
  const torchrun = intVar(env, 'WORLD_SIZE') !== undefined && intVar(env, 'RANK') !== undefined;
  const slurm = !torchrun && intVar(env, 'SLURM_NTASKS') !== undefined && intVar(env, 'SLURM_PROCID') !== undefined;
  if (!torchrun && !slurm) return undefined;
  const worldSize = (torchrun ? intVar(env, 'WORLD_SIZE') : intVar(env, 'SLURM_NTASKS')) as number;
  const rank = (torchrun ? intVar(env, 'RANK') : intVar(env, 'SLURM_PROCID')) as number;
  const localRank = (torchrun ? intVar(env, 'LOCAL_RANK') : intVar(env, 'SLURM_LOCALID')) ?? 0;
  const localWorldSize = (torchrun ? intVar(env, 'LOCAL_WORLD_SIZE') : intVar(env, 'SLURM_NTASKS_PER_NODE')) ?? worldSize;
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
}

/**
 * Spawns `nprocs` workers of this node (ranks nodeRank·nprocs + i) with torchrun's
 * variables and the rendezvous URL, splits the cores between them (SSL_ZOO_NUM_THREADS /
 * OMP_NUM_THREADS = cores / nprocs unless set), and waits. Global rank 0 prints to this
 * terminal; the others' output is kept and shown if they fail. When a worker fails, the
 * others are stopped and its exit code (2 for a user error) is returned, its error printed
 * once. Resolves to 0 when every worker succeeds.
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
  let firstFailure: { rank: number; code: number } | undefined;
  let stopping = false;

  const stopAll = (signal: NodeJS.Signals) => {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill(signal);
  };
  const forward = (signal: NodeJS.Signals) => () => {
    stopping = true;
    stopAll(signal);
  };
  const onInt = forward('SIGINT');
  const onTerm = forward('SIGTERM');
  process.on('SIGINT', onInt);
  process.on('SIGTERM', onTerm);

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
        stdio: rank === 0 ? ['ignore', 'inherit', 'pipe'] : ['ignore', 'ignore', 'pipe'],
      });
      children.push(child);
      stderrTails[localRank] = '';
      child.stderr?.on('data', (chunk: Buffer) => {
        if (rank === 0) process.stderr.write(chunk);
        stderrTails[localRank] = (stderrTails[localRank] + chunk.toString()).slice(-16384);
      });
      return new Promise<void>((resolve) => {
        child.on('exit', (code, signal) => {
          const status = code ?? (signal ? 1 : 0);
          if (status !== 0 && !firstFailure && !stopping) {
            firstFailure = { rank: localRank, code: status === 2 ? 2 : 1 };
            stopping = true;
            stopAll('SIGTERM');
            const killer = setTimeout(() => stopAll('SIGKILL'), options.killAfterMs ?? 5000);
            killer.unref();
          }
          resolve();
        });
      });
    });
    await Promise.all(exits);
  } finally {
    process.off('SIGINT', onInt);
    process.off('SIGTERM', onTerm);
    if (storeDir) rmSync(storeDir, { recursive: true, force: true });
  }
  if (!firstFailure) return stopping ? 1 : 0;
  const { rank: localRank, code } = firstFailure;
  const rank = nodeRank * nprocs + localRank;
  if (rank !== 0) {
    const lines = stderrTails[localRank].trim().split('\n');
    const message = code === 2 ? lines.filter((l) => l.startsWith('ssl-train: error:')).slice(-1)[0] ?? lines.slice(-1)[0] : lines.slice(-20).join('\n');
    process.stderr.write(`${message.startsWith('ssl-train:') ? message : `ssl-train: rank ${rank} failed: ${message}`}\n`);
  }
  return code;
}
