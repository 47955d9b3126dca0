/**
 * The one TensorFlow.js entry point of ssl-zoo: every module imports `tf` from here, so
 * that the backend chosen by {@link initEngine} is the one everything uses.
 */
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';

export { tf };
export type Tensor = tf.Tensor;
export type Variable = tf.Variable;
export type Scalar = tf.Scalar;
