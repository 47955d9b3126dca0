/**
 * `ssl-train serve`: the training page (examples/browser, docs/browser.md) over HTTP with
 * Node's http module. It serves the page's own files and nothing else: the page, the
 * browser bundle (`dist/browser`, from `npm run build:browser`) and the compiled session
 * module; a name with a slash, or any other file, is a 404. It runs until SIGINT/SIGTERM.
 */
import { Command } from 'commander';
import { existsSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { extname, join } from 'node:path';
import { invalidValue, UserError } from '../core/errors.js';
import { packageRoot } from '../core/package-root.js';

/** Content types of the files the page is made of. */
const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.map': 'application/json',
  '.json': 'application/json',
  '.png': 'image/png',
};

/** The folders a page file is looked up in, in order: the page's sources, the compiled session module, the bundle. */
export function pageFolders(root = packageRoot()): string[] {
  return [join(root, 'examples', 'browser'), join(root, 'dist', 'examples', 'browser'), join(root, 'dist', 'browser')];
}

/** The file that answers `pathname` (`/` is `index.html`), or undefined: only plain names of the page's folders with a known type. */
export function pageFile(pathname: string, folders: string[]): string | undefined {
  const name = pathname === '/' ? 'index.html' : decodeURIComponent(pathname.slice(1));
  if (!/^[\w.-]+$/.test(name) || name.startsWith('.') || !(extname(name) in CONTENT_TYPES)) return undefined;
  return folders.map((folder) => join(folder, name)).find((path) => existsSync(path));
}

/** Starts the page's server on `host:port`; a busy port or an address that cannot be bound is a user error. */
export async function startPageServer(host: string, port: number, folders = pageFolders()): Promise<Server> {
  const bundle = join(folders[2]!, 'ssl-zoo.js');
  if (!existsSync(bundle)) throw new UserError(`serve: the browser bundle ${bundle} is missing; build it with npm run build:browser`);
  const server = createServer((request, response) => {
    const path = request.method === 'GET' || request.method === 'HEAD' ? pageFile(new URL(request.url ?? '/', 'http://page').pathname, folders) : undefined;
    if (!path) {
      response.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
      return;
    }
    const body = readFileSync(path);
    response.writeHead(200, { 'content-type': CONTENT_TYPES[extname(path)]!, 'content-length': body.byteLength, 'cache-control': 'no-cache' });
    response.end(request.method === 'HEAD' ? undefined : body);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (e: NodeJS.ErrnoException) => {
      if (e.code === 'EADDRINUSE') reject(new UserError(`serve: port ${port} on ${host} is in use; pick another with --port N`));
      else if (e.code === 'EADDRNOTAVAIL' || e.code === 'ENOTFOUND' || e.code === 'EACCES') {
        reject(new UserError(`serve: cannot listen on ${host}:${port} (${e.code}); use a local address (127.0.0.1) and a port above 1023`));
      } else reject(e);
    });
    server.listen(port, host, () => resolve());
  });
  return server;
}

/** A port number from a flag value: an integer from 0 (any free port) to 65535. */
function parsePort(value: string): number {
  const port = Number(value);
  if (!/^\d+$/.test(value) || port > 65535) throw invalidValue('--port', value, 'an integer from 0 to 65535');
  return port;
}

/** The `serve` command. */
export function serveCommand(): Command {
  return new Command('serve')
    .description('serve the training page (examples/browser): train on a folder of your images in a browser tab; the images never leave the machine')
    .option('--port <n>', 'port to listen on (0: any free port)', '8080')
    .option('--host <address>', 'address to listen on (the page needs a secure context for WebGPU: localhost or 127.0.0.1)', '127.0.0.1')
    .action(async (opts: { port: string; host: string }) => {
      const server = await startPageServer(opts.host, parsePort(opts.port));
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : Number(opts.port);
      process.stdout.write(`${JSON.stringify({ url: `http://${opts.host.includes(':') ? `[${opts.host}]` : opts.host}:${port}/` })}\n`);
      await new Promise<void>((resolve) => {
        const stop = (): void => {
          process.off('SIGINT', stop);
          process.off('SIGTERM', stop);
          server.close(() => resolve());
          server.closeAllConnections();
        };
        process.on('SIGINT', stop);
        process.on('SIGTERM', stop);
      });
    });
}
