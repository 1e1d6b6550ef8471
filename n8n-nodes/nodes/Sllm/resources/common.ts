import type { IDataObject, INodeProperties } from 'n8n-workflow';

export type Resource = 'chat' | 'completion' | 'textToSql' | 'batch' | 'response';

/** The model dropdown, filled from `GET /models`; an expression may name any model. */
export function modelProperty(resource: Resource, operation?: string[]): INodeProperties {
	return {
		displayName: 'Model Name or ID',
		name: 'model',
		type: 'options',
		typeOptions: { loadOptionsMethod: 'getModels' },
		default: '',
		required: true,
		description:
			'Model served by sllm. Choose from the list, or specify an ID using an <a href="https://docs.n8n.io/code/expressions/">expression</a>.',
		displayOptions: {
			show: operation ? { resource: [resource], operation } : { resource: [resource] },
		},
	};
}

/** Sampling options shared by chat and completions (OpenAI names on the wire). */
export const samplingOptions: INodeProperties[] = [
	{
		displayName: 'Frequency Penalty',
		name: 'frequencyPenalty',
		type: 'number',
		default: 0,
		typeOptions: { minValue: -2, maxValue: 2, numberPrecision: 2 },
		description: 'Positive values penalise tokens by how often they already appeared',
	},
	{
		displayName: 'Maximum Number of Tokens',
		name: 'maxTokens',
		type: 'number',
		default: 256,
		typeOptions: { minValue: 1 },
		description: 'The most tokens to generate',
	},
	{
		displayName: 'Presence Penalty',
		name: 'presencePenalty',
		type: 'number',
		default: 0,
		typeOptions: { minValue: -2, maxValue: 2, numberPrecision: 2 },
		description: 'Positive values penalise tokens that already appeared at all',
	},
	{
		displayName: 'Seed',
		name: 'seed',
		type: 'number',
		default: 0,
		description: 'Seed for sampling, for reproducible output',
	},
	{
		displayName: 'Stop Sequences',
		name: 'stop',
		type: 'string',
		default: '',
		description: 'Comma-separated sequences at which generation stops',
	},
	{
		displayName: 'Temperature',
		name: 'temperature',
		type: 'number',
		default: 0.7,
		typeOptions: { minValue: 0, maxValue: 2, numberPrecision: 2 },
		description: 'Randomness of sampling; 0 means greedy decoding',
	},
	{
		displayName: 'Top P',
		name: 'topP',
		type: 'number',
		default: 1,
		typeOptions: { minValue: 0, maxValue: 1, numberPrecision: 2 },
		description: 'Nucleus sampling: only tokens within this probability mass are considered',
	},
];

/** Maps the options collection onto OpenAI request fields, leaving out what was not set. */
export function samplingBody(options: IDataObject): IDataObject {
	const body: IDataObject = {};
	if (options.temperature !== undefined) body.temperature = options.temperature;
	if (options.maxTokens !== undefined) body.max_tokens = options.maxTokens;
	if (options.topP !== undefined) body.top_p = options.topP;
	if (options.frequencyPenalty !== undefined) body.frequency_penalty = options.frequencyPenalty;
	if (options.presencePenalty !== undefined) body.presence_penalty = options.presencePenalty;
	if (options.seed !== undefined) body.seed = options.seed;
	if (typeof options.stop === 'string' && options.stop.trim() !== '') {
		body.stop = options.stop
			.split(',')
			.map((s) => s.trim())
			.filter((s) => s !== '');
	}
	return body;
}

export function simplifyProperty(resource: Resource, operation: string[]): INodeProperties {
	return {
		displayName: 'Simplify Output',
		name: 'simplify',
		type: 'boolean',
		default: true,
		description:
			'Whether to return only the generated text and the main fields instead of the full response',
		displayOptions: { show: { resource: [resource], operation } },
	};
}

export const waitOptions = (resource: Resource, operation: string[]): INodeProperties[] => [
	{
		displayName: 'Wait for Completion',
		name: 'waitForCompletion',
		type: 'boolean',
		default: false,
		description: 'Whether to poll until the job reaches a final status before returning',
		displayOptions: { show: { resource: [resource], operation } },
	},
	{
		displayName: 'Poll Interval (Seconds)',
		name: 'pollInterval',
		type: 'number',
		default: 5,
		typeOptions: { minValue: 1 },
		displayOptions: { show: { resource: [resource], operation, waitForCompletion: [true] } },
	},
	{
		displayName: 'Maximum Wait (Seconds)',
		name: 'maxWait',
		type: 'number',
		default: 600,
		typeOptions: { minValue: 1 },
		description: 'Give up waiting after this long and return the last status seen',
		displayOptions: { show: { resource: [resource], operation, waitForCompletion: [true] } },
	},
];

/** The sampling options plus node-specific ones, in the alphabetical order n8n's UI lists them. */
export function withSamplingOptions(extra: INodeProperties[]): INodeProperties[] {
	return [...samplingOptions, ...extra].sort((a, b) => a.displayName.localeCompare(b.displayName));
}
