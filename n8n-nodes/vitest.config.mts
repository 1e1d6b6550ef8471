import { createRequire } from 'node:module';
import { defineConfig } from 'vitest/config';

const require = createRequire(import.meta.url);

export default defineConfig({
	resolve: {
		// Load the CommonJS builds, as n8n itself does.
		alias: {
			'n8n-workflow': require.resolve('n8n-workflow'),
			'@n8n/ai-node-sdk': require.resolve('@n8n/ai-node-sdk'),
		},
	},
	test: {
		include: ['test/**/*.test.ts'],
	},
});
