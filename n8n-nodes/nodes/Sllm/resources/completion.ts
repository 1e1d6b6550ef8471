import type { IDataObject, IExecuteFunctions, INodeProperties } from 'n8n-workflow';
import { NodeOperationError } from 'n8n-workflow';

import { sllmApiRequest } from '../../shared/transport';
import { modelProperty, samplingBody, simplifyProperty, withSamplingOptions } from './common';

const show = { resource: ['completion'], operation: ['create'] };

export const completionOperations: INodeProperties = {
	displayName: 'Operation',
	name: 'operation',
	type: 'options',
	noDataExpression: true,
	displayOptions: { show: { resource: ['completion'] } },
	options: [
		{
			name: 'Complete',
			value: 'create',
			action: 'Complete a prompt',
			description: 'Continue a raw prompt with POST /completions',
		},
	],
	default: 'create',
};

export const completionFields: INodeProperties[] = [
	modelProperty('completion', ['create']),
	{
		displayName: 'Prompt',
		name: 'prompt',
		type: 'string',
		typeOptions: { rows: 4 },
		default: '',
		required: true,
		description: 'Text the model continues (no chat template is applied)',
		displayOptions: { show },
	},
	simplifyProperty('completion', ['create']),
	{
		displayName: 'Options',
		name: 'options',
		type: 'collection',
		placeholder: 'Add Option',
		default: {},
		displayOptions: { show },
		options: withSamplingOptions([]),
	},
];

export function simplifyCompletion(response: IDataObject): IDataObject {
	const choices = Array.isArray(response.choices) ? (response.choices as IDataObject[]) : [];
	const first = choices[0] ?? {};
	const result: IDataObject = {
		text: first.text ?? '',
		finish_reason: first.finish_reason ?? null,
		model: response.model,
		usage: response.usage,
		id: response.id,
	};
	if (choices.length > 1) result.choices = choices.map((c) => c.text ?? '');
	return result;
}

export async function executeCompletion(this: IExecuteFunctions, i: number): Promise<IDataObject> {
	const model = this.getNodeParameter('model', i) as string;
	const prompt = this.getNodeParameter('prompt', i, '') as string;
	const options = this.getNodeParameter('options', i, {}) as IDataObject;
	const simplify = this.getNodeParameter('simplify', i, true) as boolean;
	if (!prompt) {
		throw new NodeOperationError(this.getNode(), 'The prompt is empty', { itemIndex: i });
	}
	const response = (await sllmApiRequest.call(this, {
		method: 'POST',
		path: '/completions',
		body: { model, prompt, ...samplingBody(options) },
		itemIndex: i,
	})) as IDataObject;
	return simplify ? simplifyCompletion(response) : response;
}
