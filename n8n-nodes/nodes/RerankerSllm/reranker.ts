/**
 * The object the Sllm Reranker sub-node supplies: LangChain's document-compressor contract
 * (`compressDocuments(documents, query)`, what n8n's vector stores call when *Rerank Results* is on)
 * over sllm's `POST /rerank` (Cohere's shape: query, documents, top_n).
 */
import type { IDataObject, ISupplyDataFunctions } from 'n8n-workflow';
import { NodeConnectionTypes, NodeOperationError } from 'n8n-workflow';

import type { Constructor } from '../shared/host';
import { traced } from '../shared/trace';
import { sllmApiRequest } from '../shared/transport';

export interface SllmRerankerSettings {
	model: string;
	/** How many documents to keep, best first. */
	topN: number;
	timeout?: number;
}

export interface DocumentLike {
	pageContent: string;
	metadata?: IDataObject;
	id?: string;
}

export interface RerankResult {
	index: number;
	relevance_score: number;
}

export interface RerankerLike {
	compressDocuments(documents: DocumentLike[], query: string): Promise<DocumentLike[]>;
}

/** `POST /rerank`: the indexes of the best `topN` of `texts`, best first, with their scores. */
export async function rerankTexts(
	ctx: ISupplyDataFunctions,
	settings: SllmRerankerSettings,
	query: string,
	texts: string[],
): Promise<RerankResult[]> {
	const response = (await sllmApiRequest.call(ctx, {
		method: 'POST',
		path: '/rerank',
		body: {
			model: settings.model,
			query,
			documents: texts,
			top_n: Math.max(1, Math.floor(settings.topN)),
			return_documents: false,
		},
		timeout: settings.timeout,
	})) as { results?: Array<{ index?: unknown; relevance_score?: unknown }> } | undefined;
	const results = Array.isArray(response?.results) ? response.results : undefined;
	if (!results) {
		throw new NodeOperationError(ctx.getNode(), 'The server answered POST /rerank without results');
	}
	return results.map((r) => {
		if (typeof r.index !== 'number' || r.index < 0 || r.index >= texts.length) {
			throw new NodeOperationError(ctx.getNode(), `POST /rerank returned an unknown index ${String(r.index)}`);
		}
		return { index: r.index, relevance_score: Number(r.relevance_score) };
	});
}

/**
 * The supplied reranker, a subclass of the host's LangChain `BaseDocumentCompressor` when there is
 * one (see shared/host.ts). The documents come back best first, at most `topN`, each with its score
 * in `metadata.relevanceScore`, where n8n's vector stores read it (as from Cohere's reranker).
 */
export function createSllmReranker(
	ctx: ISupplyDataFunctions,
	settings: SllmRerankerSettings,
	Base?: Constructor,
): RerankerLike {
	const type = NodeConnectionTypes.AiReranker;
	const Parent = (Base ?? class {}) as new () => object;
	class SllmReranker extends Parent implements RerankerLike {
		model = settings.model;

		topN = settings.topN;

		async compressDocuments(documents: DocumentLike[], query: string): Promise<DocumentLike[]> {
			if (documents.length === 0) return [];
			return await traced(
				ctx,
				type,
				{ query, documents: documents as unknown as IDataObject[] },
				async () => {
					const texts = documents.map((d) => d.pageContent);
					const results = await rerankTexts(ctx, settings, query, texts);
					return results.map(({ index, relevance_score }) => {
						const doc = documents[index];
						return { ...doc, metadata: { ...(doc.metadata ?? {}), relevanceScore: relevance_score } };
					});
				},
				(response) => ({ response: response as unknown as IDataObject[] }),
			);
		}
	}
	return new SllmReranker();
}
