/**
 * A process racing for a run directory's lock (tests/trainer/run-lock.test.ts): waits until
 * the shared start time (argv: runDir, startAtMs, holdMs), tries to acquire the lock, prints
 * one JSON line `{"won", "warnings", "error"}` and, when it won, holds the lock for holdMs
 * (so that every other taker decides while it is held) before releasing it.
 */
import { acquireRunLock } from '../../src/trainer/run-lock.js';

const [runDir, startAt, holdMs] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4])];
const warnings: string[] = [];
while (Date.now() < startAt) {
  // Busy wait: every taker starts at the same moment, not when its event loop next turns.
}
try {
  const lock = acquireRunLock(runDir, { command: 'run-lock-taker', warn: (line) => warnings.push(line) });
  process.stdout.write(`${JSON.stringify({ won: true, warnings })}\n`);
  await new Promise((resolve) => setTimeout(resolve, holdMs));
  lock.release();
} catch (e) {
  process.stdout.write(`${JSON.stringify({ won: false, warnings, error: (e as Error).message })}\n`);
}
