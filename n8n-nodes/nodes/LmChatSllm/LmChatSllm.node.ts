import type {
	IDataObject,
	INodeType,
	INodeTypeDescription,
	ISupplyDataFunctions,
	SupplyData,
} from 'n8n-workflow';
import { NodeConnectionTypes, NodeOperationError } from 'n8n-workflow';

import { CREDENTIAL_NAME, getModels, normalizeBaseUrl } from '../shared/transport';
import type { ChatModelBackends, SllmChatModelSettings } from './runtime';
import { defaultBackends, supplySllmChatModel } from './runtime';

/** Reads the node's parameters into the settings the runtime needs. */
export async function readChatModelSettings(
	ctx: ISupplyDataFunctions,
	itemIndex: number,
): Promise<SllmChatModelSettings> {
	const credentials = await ctx.getCredentials(CREDENTIAL_NAME);
	const model = ctx.getNodeParameter('model', itemIndex, '') as string;
	if (!model) {
		throw new NodeOperationError(ctx.getNode(), 'Choose a model', { itemIndex });
	}
	const options = ctx.getNodeParameter('options', itemIndex, {}) as IDataObject;
	const apiKey = typeof credentials.apiKey === 'string' ? credentials.apiKey.trim() : '';
	const settings: SllmChatModelSettings = {
		baseUrl: normalizeBaseUrl(credentials.baseUrl),
		model,
	};
	if (apiKey) settings.apiKey = apiKey;
	if (typeof options.temperature === 'number') settings.temperature = options.temperature;
	if (typeof options.maxTokens === 'number') settings.maxTokens = options.maxTokens;
	if (typeof options.topP === 'number') settings.topP = options.topP;
	if (typeof options.timeout === 'number') settings.timeout = options.timeout;
	if (typeof options.maxRetries === 'number') settings.maxRetries = options.maxRetries;
	return settings;
}

export class LmChatSllm implements INodeType {
	/** Replaceable in tests; see runtime.ts for how the model reaches n8n 1.x and 2.x. */
	static backends: ChatModelBackends = defaultBackends;

	description: INodeTypeDescription = {
		displayName: 'Sllm Chat Model',
		name: 'lmChatSllm',
		icon: { light: 'file:../../icons/sllm.svg', dark: 'file:../../icons/sllm.dark.svg' },
		group: ['transform'],
		version: [1],
		subtitle: '={{ $parameter["model"] }}',
		description: 'Chat model served by sllm, for the AI Agent and other AI nodes',
		defaults: {
			name: 'Sllm Chat Model',
		},
		inputs: [],
		outputs: [NodeConnectionTypes.AiLanguageModel],
		outputNames: ['Model'],
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
				typeOptions: { loadOptionsMethod: 'getModels' },
				default: '',
				required: true,
				description:
					'Model served by sllm. Choose from the list, or specify an ID using an <a href="https://docs.n8n.io/code/expressions/">expression</a>.',
			},
			{
				displayName: 'Options',
				name: 'options',
				type: 'collection',
				placeholder: 'Add Option',
				default: {},
				options: [
					{
						displayName: 'Max Retries',
						name: 'maxRetries',
						type: 'number',
						default: 2,
						typeOptions: { minValue: 0 },
						description: 'How often a failed request is retried',
					},
					{
						displayName: 'Maximum Number of Tokens',
						name: 'maxTokens',
						type: 'number',
						default: -1,
						description: 'The most tokens to generate per call; -1 leaves it to the server',
					},
					{
						displayName: 'Sampling Temperature',
						name: 'temperature',
						type: 'number',
						default: 0.7,
						typeOptions: { minValue: 0, maxValue: 2, numberPrecision: 2 },
						description: 'Randomness of sampling; 0 means greedy decoding',
					},
					{
						displayName: 'Timeout',
						name: 'timeout',
						type: 'number',
						default: 60000,
						typeOptions: { minValue: 1 },
						description: 'Maximum time a request may take, in milliseconds',
					},
					{
						displayName: 'Top P',
						name: 'topP',
						type: 'number',
						default: 1,
						typeOptions: { minValue: 0, maxValue: 1, numberPrecision: 2 },
						description:
							'Nucleus sampling: only tokens within this probability mass are considered',
					},
				],
			},
		],
	};

	methods = {
		loadOptions: {
			getModels,
		},
	};

	async supplyData(this: ISupplyDataFunctions, itemIndex: number): Promise<SupplyData> {
		const settings = await readChatModelSettings(this, itemIndex);
		return await supplySllmChatModel(this, settings, LmChatSllm.backends);
	}
}
