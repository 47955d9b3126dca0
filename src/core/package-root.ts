/** Where ssl-zoo's own files (native addons, configs) are, from source or from `dist/`. */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

let cached: string | undefined;

/** The nearest ancestor directory of this file whose package.json is ssl-zoo's. */
export function packageRoot(): string {
  if (cached !== undefined) return cached;
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const manifest = join(dir, 'package.json');
    if (existsSync(manifest)) {
      try {
        if ((JSON.parse(readFileSync(manifest, 'utf8')) as { name?: string }).name === 'ssl-zoo') return (cached = dir);
      } catch {
        // unreadable manifest: keep looking upwards
      }
    }
    const parent = dirname(dir);
    if (parent === dir) throw new Error('cannot find the ssl-zoo package root (a package.json named ssl-zoo above ' + fileURLToPath(import.meta.url) + ')');
    dir = parent;
  }
}

/** The installed ssl-zoo package's version (its package.json's). */
export function packageVersion(): string {
  return (JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as { version: string }).version;
}
