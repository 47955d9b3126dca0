/**
 * The one TensorFlow.js entry point of ssl-zoo: every module imports `tf` from here, so
 * that the backend chosen by `initEngine` is the one everything uses, and so that the
 * gradient functions are registered before any gradient is taken.
 */
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
// The platform's gradient registration (Node: ./tf-gradients.ts; browser: its .browser.ts).
import './tf-gradients.js';

export { tf };
export type Tensor = tf.Tensor;
export type Variable = tf.Variable;
export type Scalar = tf.Scalar;
export type Tensor1D = tf.Tensor1D;
export type Tensor2D = tf.Tensor2D;
export type Tensor4D = tf.Tensor4D;
