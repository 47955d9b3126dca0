/**
 * `node stop-driver.js <mode> <dir>`: launches two workers of itself through `launchWorkers`
 * (stop timeout 1.5 s) and exits with its code. As a worker (RANK set): it writes
 * `<dir>/ready-<rank>` once its handlers are installed, then waits; `graceful` exits with
 * 128 + the number of the first SIGUSR1 or SIGTERM it gets, 100 ms later (as a rank that saves
 * its checkpoint does); `stubborn` ignores them (a rank that never finishes its step);
 * `listening` tells the launcher it takes stop messages, ignores the signals themselves, and
 * exits like `graceful` on the launcher's stop message.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { launchWorkers } from '../../../src/distributed/launcher.js';
import { signalExitCode, STOP_LISTENING_MESSAGE, STOP_MESSAGE, type StopSignalName } from '../../../src/trainer/stop-signal.js';

const [mode, dir] = [process.argv[2] ?? 'graceful', process.argv[3] ?? '.'];

if (process.env.RANK === undefined) {
  process.exitCode = await launchWorkers({
    nprocs: 2,
    numNodes: 1,
    nodeRank: 0,
    script: fileURLToPath(import.meta.url),
    args: [mode, dir],
    stopTimeoutMs: 1500,
  });
} else {
  const alive = setInterval(() => undefined, 1000);
  for (const [signal, code] of [
    ['SIGUSR1', 138],
    ['SIGTERM', 143],
  ] as const) {
    process.on(signal, () => {
      if (mode === 'graceful') setTimeout(() => process.exit(code), 100);
    });
  }
  if (mode === 'listening') {
    process.on('message', (m: { type?: string; signal?: StopSignalName }) => {
      if (m.type === STOP_MESSAGE && m.signal) setTimeout(() => process.exit(signalExitCode(m.signal!)), 100);
    });
    process.send!({ type: STOP_LISTENING_MESSAGE });
  }
  setTimeout(() => clearInterval(alive), 60_000);
  writeFileSync(join(dir, `ready-${process.env.RANK}`), '');
}
