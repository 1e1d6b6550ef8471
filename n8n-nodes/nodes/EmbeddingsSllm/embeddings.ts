/**
 * The object the Sllm Embeddings sub-node supplies: LangChain's `Embeddings` contract
 * (`embedDocuments`, `embedQuery`) over sllm's `POST /embeddings`, sent through the credential
 * (base URL and key) like every other request of this package.
 */
import type { IDataObject, ISupplyDataFunctions } from 'n8n-workflow';
import { NodeConnectionTypes, NodeOperationError } from 'n8n-workflow';

import type { Constructor } from '../shared/host';
import { traced } from '../shared/trace';
import { sllmApiRequest } from '../shared/transport';

export interface SllmEmbeddingsSettings {
	model: string;
	/** Texts per request (n8n's own OpenAI node sends up to 512). */
	batchSize: number;
	/** Shorter vectors, for models trained for it; the server refuses it otherwise. */
	dimensions?: number;
	timeout?: number;
}

export interface EmbeddingsLike {
	embedDocuments(texts: string[]): Promise<number[][]>;
	embedQuery(text: string): Promise<number[]>;
}

/** `POST /embeddings` for `texts`, `batchSize` at a time; vectors come back in the order of `texts`. */
export async function embedTexts(
	ctx: ISupplyDataFunctions,
	settings: SllmEmbeddingsSettings,
	texts: string[],
): Promise<number[][]> {
	const vectors: number[][] = [];
	const size = Math.max(1, Math.floor(settings.batchSize));
	for (let start = 0; start < texts.length; start += size) {
		const input = texts.slice(start, start + size);
		const body: IDataObject = { model: settings.model, input, encoding_format: 'float' };
		if (settings.dimensions !== undefined && settings.dimensions > 0) body.dimensions = settings.dimensions;
		const response = (await sllmApiRequest.call(ctx, {
			method: 'POST',
			path: '/embeddings',
			body,
			timeout: settings.timeout,
		})) as { data?: Array<{ index?: number; embedding?: unknown }> } | undefined;
		const data = Array.isArray(response?.data) ? response.data : [];
		const batch: number[][] = new Array(input.length);
		for (const [position, item] of data.entries()) {
			const index = typeof item.index === 'number' ? item.index : position;
			if (!Array.isArray(item.embedding) || index < 0 || index >= input.length) continue;
			batch[index] = item.embedding as number[];
		}
		if (data.length !== input.length || batch.some((v) => v === undefined)) {
			throw new NodeOperationError(
				ctx.getNode(),
				`The server returned ${data.length} embeddings for ${input.length} texts`,
				{ description: 'POST /embeddings must answer one float vector per input, with its index' },
			);
		}
		vectors.push(...batch);
	}
	return vectors;
}

/**
 * The supplied embeddings, a subclass of the host's LangChain `Embeddings` when there is one
 * (see shared/host.ts), each call traced as this sub-node's input and output.
 */
export function createSllmEmbeddings(
	ctx: ISupplyDataFunctions,
	settings: SllmEmbeddingsSettings,
	Base?: Constructor,
): EmbeddingsLike {
	const type = NodeConnectionTypes.AiEmbedding;
	const Parent = (Base ?? class {}) as new (fields?: IDataObject) => object;
	class SllmEmbeddings extends Parent implements EmbeddingsLike {
		model = settings.model;

		constructor() {
			super({});
		}

		async embedDocuments(texts: string[]): Promise<number[][]> {
			return await traced(
				ctx,
				type,
				{ documents: texts },
				async () => await embedTexts(ctx, settings, texts),
				(response) => ({ response }),
			);
		}

		async embedQuery(text: string): Promise<number[]> {
			return await traced(
				ctx,
				type,
				{ query: text },
				async () => (await embedTexts(ctx, settings, [text]))[0],
				(response) => ({ response }),
			);
		}
	}
	return new SllmEmbeddings();
}
