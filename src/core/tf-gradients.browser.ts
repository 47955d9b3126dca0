/**
 * Registers tfjs-core's gradient functions in the browser build (in place of
 * ./tf-gradients.ts): tfjs-core's ES module `register_all_gradients`, bundled with the rest.
 */
import '@tensorflow/tfjs-core/dist/register_all_gradients.js';
