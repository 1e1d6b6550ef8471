/* Reads the package's own files; the shipped code does not use these modules. */
/* eslint-disable @n8n/community-nodes/no-restricted-imports, @n8n/community-nodes/no-restricted-globals */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import type { INodeProperties, INodeType } from 'n8n-workflow';
import { describe, expect, it } from 'vitest';

import { LmChatSllm } from '../nodes/LmChatSllm/LmChatSllm.node';
import { Sllm } from '../nodes/Sllm/Sllm.node';

const root = join(__dirname, '..');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));

describe('package.json', () => {
	it('is an n8n community package whose n8n section points at built files of real sources', () => {
		expect(pkg.name).toBe('n8n-nodes-sllm');
		expect(pkg.keywords).toContain('n8n-community-node-package');
		expect(pkg.n8n.n8nNodesApiVersion).toBe(1);
		expect(pkg.dependencies ?? {}).toEqual({});
		expect(pkg.peerDependencies['n8n-workflow']).toBe('*');
		for (const built of [...pkg.n8n.credentials, ...pkg.n8n.nodes] as string[]) {
			expect(built).toMatch(/^dist\/.+\.js$/);
			const source = built.replace(/^dist\//, '').replace(/\.js$/, '.ts');
			expect(existsSync(join(root, source)), source).toBe(true);
		}
	});
});

const nodeTypes: Record<string, INodeType> = {
	'n8n-nodes-sllm.sllm': new Sllm(),
	'n8n-nodes-sllm.lmChatSllm': new LmChatSllm(),
};

function allowedValues(type: INodeType, name: string): unknown[] {
	return type.description.properties
		.filter((p: INodeProperties) => p.name === name)
		.flatMap((p) => (p.options ?? []).map((o) => (o as { value?: unknown }).value));
}

describe('examples', () => {
	const dir = join(root, 'examples');
	const files = readdirSync(dir).filter((f) => f.endsWith('.json'));

	it('ships the three documented examples', () => {
		expect(files.sort()).toEqual([
			'batch-over-spreadsheet-rows.json',
			'chat-with-ai-agent.json',
			'daily-text-to-sql-report.json',
		]);
	});

	it.each(files)('%s uses existing nodes, resources, operations and connections', (file) => {
		const workflow = JSON.parse(readFileSync(join(dir, file), 'utf8'));
		const names = new Set(workflow.nodes.map((n: { name: string }) => n.name));
		let ours = 0;
		for (const node of workflow.nodes) {
			if (!String(node.type).startsWith('n8n-nodes-sllm.')) continue;
			ours++;
			const type = nodeTypes[node.type];
			expect(type, node.type).toBeDefined();
			expect(node.credentials?.sllmApi).toBeDefined();
			const { resource, operation } = node.parameters;
			if (resource !== undefined) expect(allowedValues(type, 'resource')).toContain(resource);
			if (operation !== undefined) expect(allowedValues(type, 'operation')).toContain(operation);
		}
		expect(ours).toBeGreaterThan(0);
		for (const [from, outputs] of Object.entries(workflow.connections)) {
			expect(names.has(from), from).toBe(true);
			for (const targets of Object.values(
				outputs as Record<string, Array<Array<{ node: string }>>>,
			)) {
				for (const target of targets.flat()) expect(names.has(target.node), target.node).toBe(true);
			}
		}
	});
});
