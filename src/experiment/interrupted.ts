/**
 * The end of a training run that a signal interrupted (see src/trainer/stop-signal.ts): the
 * one line that says where it stopped and how to resume, and with `--requeue` under Slurm,
 * `scontrol requeue $SLURM_JOB_ID`.
 */
import { spawnSync } from 'node:child_process';
import type { TrainingInterrupted } from '../trainer/stop-signal.js';

/** How long `scontrol requeue` may take before it counts as failed. */
const SCONTROL_TIMEOUT_MS = 60_000;

/** What {@link finishInterruptedRun} needs to know about the run. */
export interface InterruptedRunContext {
  /** `--requeue`. */
  requeue: boolean;
  /** Whether this process is global rank 0 (the one that reports and requeues). */
  isGlobalZero: boolean;
  env?: NodeJS.ProcessEnv;
  /** Where the lines go (default stderr). */
  write?: (line: string) => void;
}

/**
 * On rank 0: prints `ssl-train: interrupted by SIGTERM at step 37 (epoch 2); <run-dir>/checkpoints/last.ckpt
 * saved; resume with --resume auto`, then with `--requeue` in a Slurm job requeues it (a
 * failure of scontrol is one more line). Returns the exit code: 128 + the signal's number,
 * whatever scontrol did.
 */
export function finishInterruptedRun(interrupted: TrainingInterrupted, context: InterruptedRunContext): number {
  const write = context.write ?? ((line: string) => process.stderr.write(`${line}\n`));
  const env = context.env ?? process.env;
  if (!context.isGlobalZero) return interrupted.exitCode;
  write(`ssl-train: ${interrupted.message}`);
  const job = env.SLURM_JOB_ID;
  if (context.requeue && job) {
    const problem = requeueSlurmJob(job, env);
    write(
      problem
        ? `ssl-train: error: --requeue: scontrol requeue ${job} failed: ${problem}`
        : `ssl-train: Slurm job ${job} requeued; it resumes with --resume auto`,
    );
  }
  return interrupted.exitCode;
}

/**
 * `--requeue` outside a Slurm job (no SLURM_JOB_ID): a warning line, or undefined when there
 * is nothing to say. Training goes on; a signal then stops the run without requeueing it.
 */
export function requeueWarning(requeue: boolean, env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (!requeue || env.SLURM_JOB_ID) return undefined;
  return 'ssl-train: warning: --requeue: SLURM_JOB_ID is not set (not a Slurm job); a signal will stop the run without requeueing it';
}

/** Runs `scontrol requeue <job>`; returns what went wrong, or undefined when it succeeded. */
function requeueSlurmJob(job: string, env: NodeJS.ProcessEnv): string | undefined {
  const r = spawnSync('scontrol', ['requeue', job], { encoding: 'utf8', env, timeout: SCONTROL_TIMEOUT_MS, stdio: ['ignore', 'pipe', 'pipe'] });
  if (r.error) {
    const code = (r.error as NodeJS.ErrnoException).code;
    return code === 'ENOENT' ? 'scontrol is not on PATH' : code === 'ETIMEDOUT' ? `no answer within ${SCONTROL_TIMEOUT_MS / 1000} s` : r.error.message;
  }
  if (r.status === 0) return undefined;
  const last = `${r.stderr ?? ''}\n${r.stdout ?? ''}`
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '')[0];
  return `${r.signal ? `killed by ${r.signal}` : `exit code ${r.status}`}${last ? `: ${last}` : ''}`;
}
