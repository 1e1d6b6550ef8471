/* LangChain is loaded as n8n loads it (CommonJS), so `instanceof` sees the classes n8n would. */
/* eslint-disable @n8n/community-nodes/no-restricted-imports, @n8n/community-nodes/no-restricted-globals */
import { createRequire } from 'node:module';

import type { IDataObject, IHttpRequestOptions } from 'n8n-workflow';
import { NodeApiError, NodeConnectionTypes, NodeOperationError } from 'n8n-workflow';
import { afterEach, describe, expect, it } from 'vitest';

import { EmbeddingsSllm } from '../nodes/EmbeddingsSllm/EmbeddingsSllm.node';
import type { EmbeddingsLike } from '../nodes/EmbeddingsSllm/embeddings';
import { BASE_URL, createContext, n8nHttpError, openAiError, routes } from './helpers';

const require = createRequire(__filename);
const defaultLoadBase = EmbeddingsSllm.loadBase;
afterEach(() => {
	EmbeddingsSllm.loadBase = defaultLoadBase;
});

/** A deterministic 3-d "embedding": counts of a, e and o, so similar texts are near. */
function vector(text: string): number[] {
	const count = (c: string) => text.split(c).length - 1;
	return [count('a') + 0.1, count('e') + 0.1, count('o') + 0.1];
}

/** `POST /embeddings` as the server answers it, with the items in reverse order (index says where). */
function embeddingsRoute(seen: IDataObject[]) {
	return (options: IHttpRequestOptions) => {
		const body = options.body as IDataObject;
		seen.push(body);
		const input = body.input as string[];
		const data = input.map((text, index) => ({ object: 'embedding', index, embedding: vector(text) }));
		return { object: 'list', model: body.model, data: data.reverse(), usage: { prompt_tokens: 1, total_tokens: 1 } };
	};
}

async function supply(params: IDataObject, http = routes({})) {
	const context = createContext({ params, http });
	const supplied = await new EmbeddingsSllm().supplyData.call(context.supplyData, 0);
	return { embeddings: supplied.response as EmbeddingsLike, ...context };
}

describe('Sllm Embeddings description', () => {
	it('is an embeddings sub-node with its model list from /models', async () => {
		const node = new EmbeddingsSllm();
		const { description } = node;
		expect(description.inputs).toEqual([]);
		expect(description.outputs).toEqual([NodeConnectionTypes.AiEmbedding]);
		expect(description.credentials).toEqual([{ name: 'sllmApi', required: true }]);
		const model = description.properties.find((p) => p.name === 'model');
		expect(model?.typeOptions?.loadOptionsMethod).toBe('getEmbeddingModels');

		const models = (ids: string[]) =>
			createContext({
				params: {},
				http: routes({ 'GET /models': () => ({ data: ids.map((id) => ({ id })) }) }),
			}).loadOptions;
		const list = node.methods.loadOptions.getEmbeddingModels;
		expect(await list.call(models(['smol', 'smol-embed', 'bge-embed']))).toEqual([
			{ name: 'bge-embed', value: 'bge-embed' },
			{ name: 'smol-embed', value: 'smol-embed' },
		]);
		// A server that lists no embedding id: any model can be pooled, so all are offered.
		expect(await list.call(models(['smol']))).toEqual([{ name: 'smol', value: 'smol' }]);
	});
});

describe('Sllm Embeddings supplyData', () => {
	it('embeds in batches through the credential, in input order, and traces each call', async () => {
		const seen: IDataObject[] = [];
		const { embeddings, requests, credentialTypes, addInputData, addOutputData } = await supply(
			{ model: 'smol-embed', options: { batchSize: 2, dimensions: 0 } },
			routes({ 'POST /embeddings': embeddingsRoute(seen) }),
		);
		const texts = ['apple', 'banana', 'cherry', 'orange', 'melon'];

		const vectors = await embeddings.embedDocuments(texts);

		expect(vectors).toEqual(texts.map(vector));
		expect(seen.map((b) => b.input)).toEqual([['apple', 'banana'], ['cherry', 'orange'], ['melon']]);
		expect(seen[0]).toEqual({ model: 'smol-embed', input: ['apple', 'banana'], encoding_format: 'float' });
		expect(requests[0]).toMatchObject({ method: 'POST', url: `${BASE_URL}/embeddings`, json: true });
		expect(credentialTypes).toEqual(['sllmApi', 'sllmApi', 'sllmApi']);
		expect(addInputData).toHaveBeenCalledWith(NodeConnectionTypes.AiEmbedding, [[{ json: { documents: texts } }]]);
		expect(addOutputData).toHaveBeenCalledWith(NodeConnectionTypes.AiEmbedding, 0, [
			[{ json: { response: vectors } }],
		]);

		expect(await embeddings.embedQuery('grape')).toEqual(vector('grape'));
		expect(seen[3]).toMatchObject({ input: ['grape'] });
	});

	it('sends dimensions when set', async () => {
		const seen: IDataObject[] = [];
		const { embeddings } = await supply(
			{ model: 'smol-embed', options: { dimensions: 64 } },
			routes({ 'POST /embeddings': embeddingsRoute(seen) }),
		);
		await embeddings.embedQuery('x');
		expect(seen[0].dimensions).toBe(64);
	});

	it("fails with the server's message, recorded as the sub-node's output", async () => {
		const { embeddings, addOutputData } = await supply(
			{ model: 'smol-embed', options: { dimensions: 64 } },
			routes({
				'POST /embeddings': () => {
					throw n8nHttpError(400, openAiError('`dimensions` is not supported by smol-embed', 'invalid_request_error', 'dimensions'));
				},
			}),
		);
		const failure = embeddings.embedQuery('x');
		await expect(failure).rejects.toThrow(NodeApiError);
		await expect(failure).rejects.toThrow('`dimensions` is not supported by smol-embed');
		expect(addOutputData.mock.calls[0][2]).toBeInstanceOf(NodeApiError);
	});

	it('refuses an answer without one vector per input', async () => {
		const { embeddings } = await supply(
			{ model: 'smol-embed', options: {} },
			routes({ 'POST /embeddings': () => ({ data: [{ index: 0, embedding: [1, 2] }] }) }),
		);
		await expect(embeddings.embedDocuments(['a', 'b'])).rejects.toThrow(
			'The server returned 1 embeddings for 2 texts',
		);
	});

	it('asks for a model', async () => {
		await expect(supply({ model: '', options: {} })).rejects.toThrow(NodeOperationError);
	});

	it("is LangChain's Embeddings and serves LangChain's in-memory vector store (what n8n's uses)", async () => {
		const { Embeddings } = require('@langchain/core/embeddings');
		const { MemoryVectorStore } = require('@langchain/classic/vectorstores/memory');
		const { embeddings } = await supply(
			{ model: 'smol-embed', options: {} },
			routes({ 'POST /embeddings': embeddingsRoute([]) }),
		);
		// In vitest the host is this package's own node_modules (in n8n: @n8n/n8n-nodes-langchain's).
		expect(embeddings).toBeInstanceOf(Embeddings);
		const store = await MemoryVectorStore.fromTexts(
			['aaaa', 'eeee', 'oooo'],
			[{ id: 1 }, { id: 2 }, { id: 3 }],
			embeddings as never,
		);
		const [best] = await store.similaritySearch('eee', 1);
		expect(best.pageContent).toBe('eeee');
	});

	it('falls back to a plain object when this n8n has no LangChain', async () => {
		EmbeddingsSllm.loadBase = () => undefined;
		const { embeddings } = await supply(
			{ model: 'smol-embed', options: {} },
			routes({ 'POST /embeddings': embeddingsRoute([]) }),
		);
		expect(await embeddings.embedDocuments(['ab'])).toEqual([vector('ab')]);
	});
});
