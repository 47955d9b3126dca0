import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { metricsRows } from './run-files.js';
import { CLI } from './run.js';

/** How an `ssl-train` process ended, with its output. */
export interface Ended {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** A running `ssl-train` process: its child, and a promise of how it ends (killed after `timeoutMs`). */
export interface Running {
  child: ChildProcess;
  /** Sends `signal` to the process, or with `group`, to its whole process group (as a terminal's Ctrl-C does). */
  send(signal: NodeJS.Signals): void;
  ended: Promise<Ended>;
  /** Whether it has exited. */
  readonly done: boolean;
}

/**
 * Starts `node ssl-train args...` with `env` added, collecting its output; with `group`, in a
 * process group of its own that its workers share (a terminal's foreground job).
 */
export function startCli(args: string[], options: { env?: NodeJS.ProcessEnv; timeoutMs?: number; group?: boolean } = {}): Running {
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { ...process.env, FORCE_COLOR: '0', ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: options.group ?? false,
  });
  const send = (signal: NodeJS.Signals) => (options.group ? process.kill(-child.pid!, signal) : child.kill(signal));
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
  let done = false;
  const ended = new Promise<Ended>((resolve) => {
    const guard = setTimeout(() => send('SIGKILL'), options.timeoutMs ?? 120_000);
    child.on('close', (code, signal) => {
      clearTimeout(guard);
      done = true;
      resolve({ code, signal, stdout, stderr });
    });
  });
  return {
    child,
    send,
    ended,
    get done() {
      return done;
    },
  };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The training rows of `<runDir>/metrics.jsonl` (a line cut short is left out). */
export function trainSteps(runDir: string): number[] {
  return metricsRows(runDir)
    .filter((r) => r['train/loss'] !== undefined)
    .map((r) => r.step as number);
}

/**
 * Sends `signals` (in order, with {@link Running.send}) to `run` once its run directory has
 * logged a training step `k` (every step must be logged: `--log-every 1`) for which `when(k)`
 * holds. Without race: the process (its group, with `group`: the workers too) is paused
 * (SIGSTOP) while `metrics.jsonl` is read, the signals are sent while it is paused, and it
 * goes on (SIGCONT) with them pending. Each logged row of step `k` is appended
 * while step `k + 1` runs, so a process that acts on a signal after its current step stops
 * after step `k + 1` or `k + 2`. Resolves to `k`, or undefined when the run ended or
 * `timeoutMs` passed first.
 */
export async function signalWhenLogged(
  run: Running,
  runDir: string,
  when: (step: number) => boolean,
  signals: NodeJS.Signals[],
  timeoutMs = 90_000,
): Promise<number | undefined> {
  const started = Date.now();
  while (!run.done && Date.now() - started < timeoutMs) {
    await sleep(5);
    if (!existsSync(join(runDir, 'metrics.jsonl'))) continue;
    run.send('SIGSTOP');
    const steps = trainSteps(runDir);
    const k = steps.at(-1);
    if (k !== undefined && when(k)) {
      for (const s of signals) run.send(s);
      run.send('SIGCONT');
      return k;
    }
    run.send('SIGCONT');
  }
  return undefined;
}

/** `<runDir>/summary.json`, or undefined. */
export function readSummary(runDir: string): Record<string, unknown> | undefined {
  const path = join(runDir, 'summary.json');
  return existsSync(path) ? (JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>) : undefined;
}
