import type {
	IDataObject,
	INodeType,
	INodeTypeDescription,
	ISupplyDataFunctions,
	SupplyData,
} from 'n8n-workflow';
import { NodeConnectionTypes, NodeOperationError } from 'n8n-workflow';

import type { Constructor } from '../shared/host';
import { loadHostClass } from '../shared/host';
import { getModelsMatching } from '../shared/transport';
import type { SllmEmbeddingsSettings } from './embeddings';
import { createSllmEmbeddings } from './embeddings';

export class EmbeddingsSllm implements INodeType {
	/** The host's LangChain `Embeddings` class; replaceable in tests. */
	static loadBase = (ctx: ISupplyDataFunctions): Constructor | undefined =>
		loadHostClass(ctx.getNode(), '@langchain/core/embeddings', 'Embeddings');

	description: INodeTypeDescription = {
		displayName: 'Sllm Embeddings',
		name: 'embeddingsSllm',
		icon: { light: 'file:../../icons/sllm.svg', dark: 'file:../../icons/sllm.dark.svg' },
		group: ['transform'],
		version: [1],
		subtitle: '={{ $parameter["model"] }}',
		description: 'Embeddings served by sllm (POST /embeddings), for vector stores',
		defaults: {
			name: 'Sllm Embeddings',
		},
		inputs: [],
		outputs: [NodeConnectionTypes.AiEmbedding],
		outputNames: ['Embeddings'],
		credentials: [
			{
				name: 'sllmApi',
				required: true,
			},
		],
		properties: [
			{
				displayName: 'Model Name or ID',
				name: 'model',
				type: 'options',
				typeOptions: { loadOptionsMethod: 'getEmbeddingModels' },
				default: '',
				required: true,
				description:
					'Embedding model served by sllm; the list shows the IDs containing "embed" (every served model pooled, as <name>-embed). Choose from the list, or specify an ID using an <a href="https://docs.n8n.io/code/expressions/">expression</a>.',
			},
			{
				displayName: 'Options',
				name: 'options',
				type: 'collection',
				placeholder: 'Add Option',
				default: {},
				options: [
					{
						displayName: 'Batch Size',
						name: 'batchSize',
						type: 'number',
						default: 512,
						typeOptions: { minValue: 1, maxValue: 2048 },
						description: 'How many texts go in one request',
					},
					{
						displayName: 'Dimensions',
						name: 'dimensions',
						type: 'number',
						default: 0,
						typeOptions: { minValue: 0 },
						description:
							'Shorter vectors, for models trained for it (the server refuses it otherwise); 0 keeps the full size',
					},
					{
						displayName: 'Timeout',
						name: 'timeout',
						type: 'number',
						default: 60000,
						typeOptions: { minValue: 1 },
						description: 'Maximum time a request may take, in milliseconds',
					},
				],
			},
		],
	};

	methods = {
		loadOptions: {
			getEmbeddingModels: getModelsMatching(/embed/i),
		},
	};

	async supplyData(this: ISupplyDataFunctions, itemIndex: number): Promise<SupplyData> {
		const model = this.getNodeParameter('model', itemIndex, '') as string;
		if (!model) throw new NodeOperationError(this.getNode(), 'Choose a model', { itemIndex });
		const options = this.getNodeParameter('options', itemIndex, {}) as IDataObject;
		const settings: SllmEmbeddingsSettings = {
			model,
			batchSize: typeof options.batchSize === 'number' ? options.batchSize : 512,
		};
		if (typeof options.dimensions === 'number' && options.dimensions > 0) {
			settings.dimensions = options.dimensions;
		}
		if (typeof options.timeout === 'number') settings.timeout = options.timeout;
		return { response: createSllmEmbeddings(this, settings, EmbeddingsSllm.loadBase(this)) };
	}
}
