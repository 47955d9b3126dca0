/**
 * `npm run build:browser`'s script: it bundles the library for browsers, prints the bundle's
 * size, and refuses a bundle in which anything resolves to a Node built-in.
 */
import { strict as assert } from 'node:assert';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tempDir } from '../helpers/run.js';
import { BUNDLE, buildBrowser } from './bundle.js';

describe('browser build', () => {
  it('writes dist/browser/ssl-zoo.js (ESM, with its sourcemap), prints its size and finds no Node built-in', () => {
    const { status, stdout, stderr } = buildBrowser();
    assert.equal(status, 0, stderr);
    const match = /ssl-zoo\.js: ([\d.]+) MB \(([\d.]+) MB gzipped\), \d+ modules, no Node built-in/.exec(stdout);
    assert.ok(match, stdout);
    assert.ok(Math.abs(Number(match[1]) - statSync(BUNDLE).size / 1e6) < 0.01, 'the printed size is the file size');
    const code = readFileSync(BUNDLE, 'utf8');
    assert.match(code, /export\{/, 'an ES module');
    assert.match(code, /sourceMappingURL=ssl-zoo\.js\.map/);
    assert.ok(statSync(`${BUNDLE}.map`).size > 0);
  });

  it('fails, naming the importer, when a module of the bundle imports a Node built-in', () => {
    const dir = tempDir();
    const entry = join(dir, 'entry.js');
    writeFileSync(join(dir, 'reads-files.js'), "import { readFileSync } from 'node:fs';\nexport const read = readFileSync;\n");
    writeFileSync(entry, "import os from 'os';\nexport { read } from './reads-files.js';\nexport const cores = os.cpus;\n");
    const { status, stderr } = buildBrowser([entry, join(dir, 'out.js')]);
    assert.equal(status, 1);
    assert.match(stderr, /build-browser: error: the browser bundle imports 2 Node built-in\(s\)/);
    assert.match(stderr, /reads-files\.js imports node:fs/);
    assert.match(stderr, /entry\.js imports os/);
  });
});
