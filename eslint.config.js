import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'collector/dashboard/static/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      'no-console': 'error',
      '@typescript-eslint/no-explicit-any': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  { files: ['bin/**'], languageOptions: { globals: { process: 'readonly', console: 'readonly' } } },
  { files: ['test/**', 'bench/**', 'cli/**', '**/cli.ts', 'bin/**'], rules: { 'no-console': 'off' } },
);
