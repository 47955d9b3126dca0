/** `ssl-train serve` as a real process: it serves the page's files and nothing else, refuses a busy port with one line (exit 2), and stops on SIGTERM. */
import { strict as assert } from 'node:assert';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { BUNDLE, buildBrowser } from './bundle.js';
import { CLI, runCli } from '../helpers/run.js';

/** Starts `ssl-train serve --port 0`; resolves with the process and the URL it prints. */
function startServe(): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(process.execPath, [CLI, 'serve', '--port', '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes('\n')) resolve({ child, url: (JSON.parse(out.split('\n')[0]) as { url: string }).url });
    });
    child.once('exit', (code) => reject(new Error(`serve exited ${code}: ${err}`)));
  });
}

describe('ssl-train serve', function () {
  let child: ChildProcess | undefined;

  before(() => {
    if (!existsSync(BUNDLE)) assert.equal(buildBrowser().status, 0);
  });

  after(() => {
    if (child && child.exitCode === null) child.kill('SIGKILL');
  });

  it('serves the page, the bundle and the session module on 127.0.0.1, a 404 for anything else; a busy port is one line, exit 2; SIGTERM stops it', async () => {
    const started = await startServe();
    child = started.child;
    assert.match(started.url, /^http:\/\/127\.0\.0\.1:\d+\/$/);
    const page = await fetch(started.url);
    assert.equal(page.status, 200);
    assert.match(page.headers.get('content-type') ?? '', /text\/html/);
    assert.match(await page.text(), /never leave this machine/);
    for (const file of ['main.js', 'session.js', 'ssl-zoo.js', 'images.js', 'store.js', 'chart.js', 'style.css']) {
      const response = await fetch(`${started.url}${file}`);
      assert.equal(response.status, 200, file);
      await response.arrayBuffer();
    }
    for (const file of ['session.ts', '..%2Fpackage.json', 'nothing.js', '.hidden.js']) {
      const response = await fetch(`${started.url}${file}`);
      assert.equal(response.status, 404, file);
      await response.arrayBuffer();
    }
    const port = new URL(started.url).port;
    const busy = runCli(['serve', '--port', port], 30_000);
    assert.equal(busy.status, 2);
    assert.equal(busy.stderr, `ssl-train: error: serve: port ${port} on 127.0.0.1 is in use; pick another with --port N\n`);
    const bad = runCli(['serve', '--port', 'eighty'], 30_000);
    assert.equal(bad.status, 2);
    assert.equal(bad.stderr, 'ssl-train: error: --port: "eighty" is not allowed; expected an integer from 0 to 65535\n');
    const exited = new Promise<number | null>((resolve) => child!.once('exit', resolve));
    child.kill('SIGTERM');
    assert.equal(await exited, 0);
  });
});
