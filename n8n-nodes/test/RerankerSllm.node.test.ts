/* LangChain is loaded as n8n loads it (CommonJS), so `instanceof` sees the classes n8n would. */
/* eslint-disable @n8n/community-nodes/no-restricted-imports, @n8n/community-nodes/no-restricted-globals */
import { createRequire } from 'node:module';

import type { IDataObject, IHttpRequestOptions } from 'n8n-workflow';
import { NodeConnectionTypes, NodeOperationError } from 'n8n-workflow';
import { describe, expect, it } from 'vitest';

import type { RerankerLike } from '../nodes/RerankerSllm/reranker';
import { RerankerSllm } from '../nodes/RerankerSllm/RerankerSllm.node';
import { BASE_URL, createContext, routes } from './helpers';

/** `POST /rerank` as the server answers it: documents sharing more words with the query score higher. */
function rerankRoute(seen: IDataObject[]) {
	return (options: IHttpRequestOptions) => {
		const body = options.body as IDataObject;
		seen.push(body);
		const split = (text: string) => text.toLowerCase().split(/\W+/).filter(Boolean);
		const words = new Set(split(String(body.query)));
		const scored = (body.documents as string[]).map((text, index) => ({
			index,
			relevance_score: split(text).filter((w) => words.has(w)).length / 10,
		}));
		scored.sort((a, b) => b.relevance_score - a.relevance_score);
		return { id: 'rerank-1', model: body.model, results: scored.slice(0, body.top_n as number) };
	};
}

const require = createRequire(__filename);

const DOCS = [
	{ pageContent: 'The stock market fell today.', metadata: { source: 'news' } },
	{ pageContent: 'Plants make food by photosynthesis from light.', metadata: { source: 'biology' } },
	{ pageContent: 'Light travels fast.', metadata: { source: 'physics' } },
];

async function supply(params: IDataObject, http = routes({})) {
	const context = createContext({ params, http });
	const supplied = await new RerankerSllm().supplyData.call(context.supplyData, 0);
	return { reranker: supplied.response as RerankerLike, ...context };
}

describe('Sllm Reranker description', () => {
	it('is a reranker sub-node', async () => {
		const node = new RerankerSllm();
		expect(node.description.inputs).toEqual([]);
		expect(node.description.outputs).toEqual([NodeConnectionTypes.AiReranker]);
		expect(node.description.credentials).toEqual([{ name: 'sllmApi', required: true }]);
		const { loadOptions } = createContext({
			params: {},
			http: routes({
				'GET /models': () => ({ data: [{ id: 'smol' }, { id: 'smol-embed' }, { id: 'bge-reranker' }] }),
			}),
		});
		expect(await node.methods.loadOptions.getRerankModels.call(loadOptions)).toEqual([
			{ name: 'bge-reranker', value: 'bge-reranker' },
			{ name: 'smol-embed', value: 'smol-embed' },
		]);
	});
});

describe('Sllm Reranker supplyData', () => {
	it('sends query, documents and top_n, and returns the best documents first with their scores', async () => {
		const seen: IDataObject[] = [];
		const { reranker, requests, addInputData, addOutputData } = await supply(
			{ model: 'smol-embed', topN: 2, options: {} },
			routes({ 'POST /rerank': rerankRoute(seen) }),
		);
		const query = 'How do plants make food from light?';

		const ranked = await reranker.compressDocuments(DOCS, query);

		expect(seen).toEqual([
			{ model: 'smol-embed', query, documents: DOCS.map((d) => d.pageContent), top_n: 2, return_documents: false },
		]);
		expect(requests[0]).toMatchObject({ method: 'POST', url: `${BASE_URL}/rerank` });
		expect(ranked.map((d) => d.metadata?.source)).toEqual(['biology', 'physics']);
		expect(ranked[0].metadata?.relevanceScore).toBeCloseTo(0.5);
		expect(ranked[0].pageContent).toBe(DOCS[1].pageContent);
		expect(DOCS[1].metadata).toEqual({ source: 'biology' }); // the inputs are left as they were
		expect(addInputData).toHaveBeenCalledWith(NodeConnectionTypes.AiReranker, [
			[{ json: { query, documents: DOCS } }],
		]);
		expect(addOutputData).toHaveBeenCalledWith(NodeConnectionTypes.AiReranker, 0, [
			[{ json: { response: ranked } }],
		]);
	});

	it('sends nothing for no documents', async () => {
		const { reranker, requests } = await supply({ model: 'smol-embed', topN: 3, options: {} });
		expect(await reranker.compressDocuments([], 'q')).toEqual([]);
		expect(requests).toEqual([]);
	});

	it('refuses results that name a document it did not send', async () => {
		const { reranker } = await supply(
			{ model: 'smol-embed', topN: 3, options: {} },
			routes({ 'POST /rerank': () => ({ results: [{ index: 7, relevance_score: 0.9 }] }) }),
		);
		await expect(reranker.compressDocuments(DOCS, 'q')).rejects.toThrow(NodeOperationError);
	});

	it("is LangChain's document compressor, usable by the contextual compression retriever n8n builds", async () => {
		const { BaseDocumentCompressor } = require('@langchain/core/retrievers/document_compressors');
		const { BaseRetriever } = require('@langchain/core/retrievers');
		const { ContextualCompressionRetriever } = require(
			'@langchain/classic/retrievers/contextual_compression',
		);
		const { reranker } = await supply(
			{ model: 'smol-embed', topN: 1, options: {} },
			routes({ 'POST /rerank': rerankRoute([]) }),
		);
		expect(reranker).toBeInstanceOf(BaseDocumentCompressor);
		class AllDocs extends BaseRetriever {
			lc_namespace = ['test'];

			async _getRelevantDocuments() {
				return DOCS.map((d) => ({ ...d }));
			}
		}
		const retriever = new ContextualCompressionRetriever({
			baseCompressor: reranker as never,
			baseRetriever: new AllDocs(),
		});
		const docs = await retriever.invoke('stock market today');
		expect(docs.map((d: { metadata: IDataObject }) => d.metadata.source)).toEqual(['news']);
	});
});
