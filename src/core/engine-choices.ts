/**
 * The engine's choices and its description, shared by the Node engine (./engine.ts) and the
 * browser's (./engine.browser.ts).
 */
import type { WebGpuInfo } from './webgpu.js';

/**
 * Backends a user can ask for: `auto` prefers TensorFlow (C++) when installed, else `cpu`;
 * `webgpu` is the GPU engine (never chosen by `auto`; `--gpus` asks for it).
 */
export const BACKEND_CHOICES = ['auto', 'cpu', 'cpu-js', 'tensorflow', 'webgpu'] as const;
export type BackendChoice = (typeof BACKEND_CHOICES)[number];

export interface EngineInfo {
  /** The tfjs backend in use: `cpu`, `tensorflow` or `webgpu`. */
  backend: string;
  /** What was asked for. */
  requested: BackendChoice;
  /** The optional package that provides the `tensorflow` backend, if loaded. */
  tensorflowPackage?: string;
  /** Whether native (oneDNN) kernels replace the hot pure-JS cpu kernels. */
  nativeKernels: boolean;
  /** The GPU adapter of the `webgpu` engine. */
  gpu?: WebGpuInfo;
}
