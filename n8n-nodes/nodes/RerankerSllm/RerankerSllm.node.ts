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
import type { SllmRerankerSettings } from './reranker';
import { createSllmReranker } from './reranker';

export class RerankerSllm implements INodeType {
	/** The host's LangChain `BaseDocumentCompressor` class; replaceable in tests. */
	static loadBase = (ctx: ISupplyDataFunctions): Constructor | undefined =>
		loadHostClass(
			ctx.getNode(),
			'@langchain/core/retrievers/document_compressors',
			'BaseDocumentCompressor',
		);

	description: INodeTypeDescription = {
		displayName: 'Sllm Reranker',
		name: 'rerankerSllm',
		icon: { light: 'file:../../icons/sllm.svg', dark: 'file:../../icons/sllm.dark.svg' },
		group: ['transform'],
		version: [1],
		subtitle: '={{ $parameter["model"] }}',
		description:
			'Reorder documents retrieved from a vector store by relevance to the query, with sllm (POST /rerank)',
		defaults: {
			name: 'Sllm Reranker',
		},
		inputs: [],
		outputs: [NodeConnectionTypes.AiReranker],
		outputNames: ['Reranker'],
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
				typeOptions: { loadOptionsMethod: 'getRerankModels' },
				default: '',
				required: true,
				description:
					'Model that scores the documents; the list shows the IDs containing "rerank" or "embed". Choose from the list, or specify an ID using an <a href="https://docs.n8n.io/code/expressions/">expression</a>.',
			},
			{
				displayName: 'Top N',
				name: 'topN',
				type: 'number',
				default: 3,
				typeOptions: { minValue: 1 },
				description: 'The maximum number of documents to return after reranking',
			},
			{
				displayName: 'Options',
				name: 'options',
				type: 'collection',
				placeholder: 'Add Option',
				default: {},
				options: [
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
			getRerankModels: getModelsMatching(/rerank|embed/i),
		},
	};

	async supplyData(this: ISupplyDataFunctions, itemIndex: number): Promise<SupplyData> {
		const model = this.getNodeParameter('model', itemIndex, '') as string;
		if (!model) throw new NodeOperationError(this.getNode(), 'Choose a model', { itemIndex });
		const options = this.getNodeParameter('options', itemIndex, {}) as IDataObject;
		const settings: SllmRerankerSettings = {
			model,
			topN: this.getNodeParameter('topN', itemIndex, 3) as number,
		};
		if (typeof options.timeout === 'number') settings.timeout = options.timeout;
		return { response: createSllmReranker(this, settings, RerankerSllm.loadBase(this)) };
	}
}
