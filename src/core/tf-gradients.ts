/**
 * Registers tfjs-core's gradient functions in Node. tfjs-core's Node entry registers none;
 * scripts/bundle-gradients.mjs bundles tfjs-core's own registrations next to this file at
 * build time. The browser build uses ./tf-gradients.browser.ts in its place.
 */
import { createRequire } from 'node:module';

createRequire(import.meta.url)('./tfjs-gradients.cjs');
