// ESLint flat config (`npm run lint`): eslint's and typescript-eslint's recommended rules, then
// eslint-config-prettier so that layout is prettier's alone (`npm run format` applies it).
import js from '@eslint/js';
import prettier from 'eslint-config-prettier';
import { defineConfig } from 'eslint/config';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default defineConfig(
  { ignores: ['dist/', 'node_modules/', 'native/', 'bench-results/', 'runs/', '.tmp/'] },
  js.configs.recommended,
  tseslint.configs.recommended,
  {
    languageOptions: { ecmaVersion: 2022, sourceType: 'module', globals: globals.node },
    rules: {
      // The project's convention, as with tsc's noUnusedParameters: a leading `_` marks a parameter
      // an interface requires but this implementation ignores; `{ a: _a, ...rest }` drops keys.
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', ignoreRestSiblings: true }],
    },
  },
  prettier,
);
