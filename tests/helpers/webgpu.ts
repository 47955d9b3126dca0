/**
 * The WebGPU engine in tests. This machine (and CI's) has no GPU: Debian's chromium ships
 * SwiftShader, a CPU implementation of Vulkan, which gives Dawn a real (slow) adapter. Tests
 * use it unless VK_ICD_FILENAMES names another driver, and fail (never skip) when Dawn finds
 * no adapter: CI installs chromium and libvulkan1, so a missing adapter is a setup failure.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { initEngine, type EngineInfo } from '../../src/core/engine.js';

/** SwiftShader's Vulkan driver manifest, from Debian's chromium package. */
export const SWIFTSHADER_ICD = '/usr/lib/chromium/vk_swiftshader_icd.json';

/**
 * `VK_ICD_FILENAMES` naming two copies of SwiftShader's manifest (with an absolute library
 * path), in a new temporary folder: Dawn then lists two identical adapters, the test bed for
 * a node with identical GPUs. Throws (failing the test) when SwiftShader is not installed.
 */
export function twoSwiftShaderIcds(): string {
  const manifest = JSON.parse(readFileSync(SWIFTSHADER_ICD, 'utf8')) as { ICD: { library_path: string } };
  manifest.ICD.library_path = resolve(dirname(SWIFTSHADER_ICD), manifest.ICD.library_path);
  const dir = mkdtempSync(join(tmpdir(), 'ssl-zoo-two-swiftshaders-'));
  const files = ['a.json', 'b.json'].map((f) => join(dir, f));
  for (const f of files) writeFileSync(f, JSON.stringify(manifest));
  return files.join(':');
}

/** The environment for a child process that runs the WebGPU engine (SwiftShader by default). */
export function webgpuEnv(env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  return { ...env, VK_ICD_FILENAMES: env.VK_ICD_FILENAMES ?? SWIFTSHADER_ICD };
}

/** Switches this process to the WebGPU engine (throws, failing the test, without an adapter). */
export async function useWebGpu(): Promise<EngineInfo> {
  process.env.VK_ICD_FILENAMES ??= SWIFTSHADER_ICD;
  return initEngine('webgpu');
}

/** Switches back to the default CPU engine (what tests/setup.ts selects). */
export async function useCpu(): Promise<EngineInfo> {
  return initEngine('cpu');
}
