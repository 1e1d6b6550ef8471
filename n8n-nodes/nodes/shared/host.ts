/**
 * LangChain base classes from the running n8n, for the embeddings and reranker sub-nodes.
 *
 * n8n's vector store nodes take whatever a sub-node supplies and call `embedDocuments`/`embedQuery`
 * or `compressDocuments` on it, so a plain object with those methods works. Subclassing the host's
 * own `Embeddings` and `BaseDocumentCompressor` makes ours indistinguishable from n8n's built-in
 * sub-nodes wherever n8n checks with `instanceof`. The classes are resolved from
 * `@n8n/n8n-nodes-langchain` (the copy of `@langchain/core` its vector stores use); this package
 * bundles and installs nothing LangChain. Where none is found the plain object is used.
 */
import type { INode } from 'n8n-workflow';
import { NodeOperationError } from 'n8n-workflow';

export type Constructor<T = object> = new (...args: never[]) => T;

function isModuleNotFound(error: unknown): boolean {
	const code = (error as { code?: string } | undefined)?.code;
	return code === 'MODULE_NOT_FOUND' || code === 'ERR_MODULE_NOT_FOUND';
}

function resolveFromHost(node: INode, specifier: string): string | undefined {
	const candidates: Array<() => string> = [
		// The copy n8n's own AI nodes use (it may be nested below @n8n/n8n-nodes-langchain).
		() => {
			// eslint-disable-next-line @n8n/community-nodes/no-restricted-imports
			const nodesLangchain = require.resolve('@n8n/n8n-nodes-langchain/package.json');
			const dir = nodesLangchain.replace(/[\\/][^\\/]*$/, '');
			return require.resolve(specifier, { paths: [dir] });
		},
		// Any copy reachable from n8n's module paths.
		() => require.resolve(specifier),
	];
	for (const resolve of candidates) {
		try {
			return resolve();
		} catch (error) {
			if (!isModuleNotFound(error)) throw new NodeOperationError(node, error as Error);
		}
	}
	return undefined;
}

/** `exportName` of the host's `specifier`, or undefined when this n8n has no such module. */
export function loadHostClass(node: INode, specifier: string, exportName: string): Constructor | undefined {
	const path = resolveFromHost(node, specifier);
	if (!path) return undefined;
	// eslint-disable-next-line @typescript-eslint/no-require-imports
	const exported = (require(path) as Record<string, unknown>)[exportName];
	return typeof exported === 'function' ? (exported as Constructor) : undefined;
}
