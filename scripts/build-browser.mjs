#!/usr/bin/env node
// Bundles ssl-zoo for browsers (docs/browser.md): dist/src/browser.js (tsc's output; run
// `npm run build` first) to dist/browser/ssl-zoo.js, an ES module with its sourcemap
// (`node scripts/build-browser.mjs [entry] [outfile]` bundles another entry: the tests), and
// umap-js to dist/browser/umap.js for the training page's UMAP.
// A module `x.js` with a sibling `x.browser.js` is replaced by it (the platform seams: the
// engine, tfjs's gradient registration, image files). Prints the bundle's size, and fails
// (exit 1) when anything in the bundle resolves to a Node built-in, naming what imports it.
// Each file is written beside its final name and renamed into place: a reader (`ssl-train
// serve`, a test) sees the previous bundle or the new one, never half of one.
import { build } from 'esbuild';
import { existsSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const entry = resolve(process.argv[2] ?? join(root, 'dist', 'src', 'browser.js'));
const outfile = resolve(process.argv[3] ?? join(root, 'dist', 'browser', 'ssl-zoo.js'));
const sources = join(root, 'dist', 'src');
const NODE_BUILTINS = new Set(builtinModules.flatMap((name) => [name, `node:${name}`]));

if (!existsSync(entry)) {
  console.error(`build-browser: error: ${relative(root, entry)} is missing; run npm run build first`);
  process.exit(1);
}

/** `x.js` -> `x.browser.js` for ssl-zoo's own modules that have a browser sibling. */
const platformModules = {
  name: 'platform-modules',
  setup(builder) {
    builder.onResolve({ filter: /^\.\.?\/.*\.js$/ }, (args) => {
      if (!args.importer.startsWith(sources)) return undefined;
      const browserPath = resolve(args.resolveDir, args.path).replace(/\.js$/, '.browser.js');
      return existsSync(browserPath) ? { path: browserPath } : undefined;
    });
  },
};

/**
 * A Node built-in that a package's "browser" field does not replace (with `false` or a
 * polyfill) is kept as an external import, so that the check below names every importer.
 */
const unresolvedBuiltins = {
  name: 'unresolved-builtins',
  setup(builder) {
    builder.onResolve({ filter: /.*/ }, async (args) => {
      if (!NODE_BUILTINS.has(args.path) || args.pluginData?.builtinProbe) return undefined;
      const { importer, kind, resolveDir } = args;
      const resolved = await builder.resolve(args.path, { importer, kind, resolveDir, pluginData: { builtinProbe: true } });
      // Resolved (the browser field replaces it): esbuild's own resolution, again, bundles that.
      return resolved.errors.length > 0 ? { path: args.path, external: true } : undefined;
    });
  },
};

/** The options both bundles share: ES modules for browsers, minified with names kept (error messages and checks name them), with a sourcemap and a metafile. */
const common = {
  bundle: true,
  format: 'esm',
  platform: 'browser',
  target: 'es2022',
  minify: true,
  keepNames: true,
  sourcemap: true,
  metafile: true,
  plugins: [platformModules, unresolvedBuiltins],
  logLevel: 'warning',
};

/** Bundles, then fails on a Node built-in import or prints the bundle's size. */
async function bundle(options) {
  const result = await build({ ...common, ...options, write: false }).catch(() => process.exit(1));
  const offending = Object.entries(result.metafile.inputs).flatMap(([file, input]) =>
    input.imports.filter((i) => NODE_BUILTINS.has(i.path) || i.path.startsWith('node:')).map((i) => `${file} imports ${i.path}`),
  );
  if (offending.length > 0) {
    console.error(`build-browser: error: the browser bundle imports ${offending.length} Node built-in(s):\n  ${offending.join('\n  ')}`);
    process.exit(1);
  }
  mkdirSync(dirname(options.outfile), { recursive: true });
  for (const file of result.outputFiles) {
    const partial = `${file.path}.${process.pid}.partial`;
    writeFileSync(partial, file.contents);
    renameSync(partial, file.path);
  }
  const code = result.outputFiles.find((file) => file.path === options.outfile).contents;
  const bytes = code.length;
  const gzipped = gzipSync(code).length;
  const mb = (n) => `${(n / 1e6).toFixed(2)} MB`;
  console.log(
    `${relative(root, options.outfile)}: ${mb(bytes)} (${mb(gzipped)} gzipped), ${Object.keys(result.metafile.inputs).length} modules, no Node built-in`,
  );
}

await bundle({ entryPoints: [entry], outfile });
if (process.argv[2] === undefined) {
  // The training page's UMAP (examples/browser/probe.js): umap-js as an ES module beside the library.
  await bundle({
    stdin: { contents: "export { UMAP } from 'umap-js';", resolveDir: root, sourcefile: 'umap-entry.js' },
    outfile: join(dirname(outfile), 'umap.js'),
  });
}
