/**
 * The one TensorFlow.js entry point of ssl-zoo: every module imports `tf` from here, so
 * that the backend chosen by `initEngine` is the one everything uses, and so that the
 * gradient functions are registered before any gradient is taken.
 */
import { createRequire } from 'node:module';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';

// tfjs-core's Node entry registers no gradients; scripts/bundle-gradients.mjs bundles
// tfjs-core's own gradient registrations next to this file at build time.
createRequire(import.meta.url)('./tfjs-gradients.cjs');

export { tf };
export type Tensor = tf.Tensor;
export type Variable = tf.Variable;
export type Scalar = tf.Scalar;
export type Tensor1D = tf.Tensor1D;
export type Tensor2D = tf.Tensor2D;
export type Tensor4D = tf.Tensor4D;
