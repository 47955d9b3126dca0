/**
 * `node launch-driver.js <mode>`: launches two workers of itself through `launchWorkers`
 * and exits with its code. As a worker (RANK set): rank 0 waits (until the launcher stops
 * it); rank 1 fails as `mode` says: `kill` (SIGKILL itself, no output), `exit3` (writes an
 * error and a stack, exits 3), `user` (a user error line, exit 2).
 */
import { fileURLToPath } from 'node:url';
import { launchWorkers } from '../../../src/distributed/launcher.js';

const mode = process.argv[2] ?? 'kill';

if (process.env.RANK === undefined) {
  process.exitCode = await launchWorkers({ nprocs: 2, numNodes: 1, nodeRank: 0, script: fileURLToPath(import.meta.url), args: [mode], killAfterMs: 2000 });
} else if (process.env.RANK === '0') {
  setTimeout(() => undefined, 30_000);
} else {
  setTimeout(() => {
    if (mode === 'kill') process.kill(process.pid, 'SIGKILL');
    if (mode === 'exit3') {
      process.stderr.write('loading shard 1\nError: disk quota exceeded\n    at writeShard (shard.js:1:1)\n    at main (main.js:2:2)\n');
      process.exit(3);
    }
    process.stderr.write('ssl-train: error: --batch-size: 7 is not allowed\n');
    process.exit(2);
  }, 200);
}
