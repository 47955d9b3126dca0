import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join, relative } from 'node:path';
import { runLockPath, type RunLockHolder } from '../../src/trainer/run-lock.js';

/** A pid that no process has any more (a process that ran and exited). */
export function deadPid(): number {
  const pid = spawnSync('true').pid;
  assert.ok(pid !== undefined && pid > 0);
  return pid;
}

/** Writes the lock of `runDir` as a run of `pid` on `host` would have. */
export function writeLock(runDir: string, pid: number, host = hostname(), command = 'ssl-train --method simclr --run-dir x'): void {
  mkdirSync(runDir, { recursive: true });
  const holder: RunLockHolder = { pid, host, startedAt: new Date().toISOString(), command, token: `fake-${pid}` };
  writeFileSync(runLockPath(runDir), JSON.stringify(holder));
}

/** SHA-256 of every file under `dir`, by path relative to it. */
export function checksums(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (d: string): void => {
    for (const name of readdirSync(d).sort()) {
      const path = join(d, name);
      if (statSync(path).isDirectory()) walk(path);
      else out[relative(dir, path)] = createHash('sha256').update(readFileSync(path)).digest('hex');
    }
  };
  walk(dir);
  return out;
}
