import type { IDataObject, IExecuteFunctions, INodeProperties } from 'n8n-workflow';
import { NodeOperationError } from 'n8n-workflow';

import { pollUntil } from '../../shared/poll';
import { sllmApiRequest } from '../../shared/transport';
import { modelProperty, waitOptions } from './common';

const FINAL_RESPONSE_STATUSES = ['completed', 'failed', 'cancelled', 'incomplete'];

export const responseOperations: INodeProperties = {
	displayName: 'Operation',
	name: 'operation',
	type: 'options',
	noDataExpression: true,
	displayOptions: { show: { resource: ['response'] } },
	options: [
		{
			name: 'Create',
			value: 'create',
			action: 'Create a background response',
			description:
				'Start a response that runs in the background (POST /responses, background: true)',
		},
		{
			name: 'Get',
			value: 'get',
			action: 'Get a background response',
			description: 'Get the status and output of a response (GET /responses/{ID})',
		},
	],
	default: 'create',
};

const create = { resource: ['response'], operation: ['create'] };

export const responseFields: INodeProperties[] = [
	modelProperty('response', ['create']),
	{
		displayName: 'Input',
		name: 'input',
		type: 'string',
		typeOptions: { rows: 4 },
		default: '',
		required: true,
		description: 'The user input of the response',
		displayOptions: { show: create },
	},
	{
		displayName: 'Options',
		name: 'options',
		type: 'collection',
		placeholder: 'Add Option',
		default: {},
		displayOptions: { show: create },
		options: [
			{
				displayName: 'Instructions',
				name: 'instructions',
				type: 'string',
				typeOptions: { rows: 2 },
				default: '',
				description: 'System instructions for the model',
			},
			{
				displayName: 'Maximum Number of Output Tokens',
				name: 'maxOutputTokens',
				type: 'number',
				default: 256,
				typeOptions: { minValue: 1 },
			},
			{
				displayName: 'Temperature',
				name: 'temperature',
				type: 'number',
				default: 0.7,
				typeOptions: { minValue: 0, maxValue: 2, numberPrecision: 2 },
			},
			{
				displayName: 'Top P',
				name: 'topP',
				type: 'number',
				default: 1,
				typeOptions: { minValue: 0, maxValue: 1, numberPrecision: 2 },
			},
		],
	},
	{
		displayName: 'Response ID',
		name: 'responseId',
		type: 'string',
		default: '',
		required: true,
		placeholder: 'e.g. resp_abc123',
		displayOptions: { show: { resource: ['response'], operation: ['get'] } },
	},
	...waitOptions('response', ['get']),
];

/** `output_text` as the OpenAI SDKs compute it: all output_text parts of all message outputs. */
export function outputText(response: IDataObject): string | null {
	if (typeof response.output_text === 'string') return response.output_text;
	if (!Array.isArray(response.output)) return null;
	const texts: string[] = [];
	for (const output of response.output as IDataObject[]) {
		if (!Array.isArray(output?.content)) continue;
		for (const part of output.content as IDataObject[]) {
			if (part?.type === 'output_text' && typeof part.text === 'string') texts.push(part.text);
		}
	}
	return texts.length ? texts.join('') : null;
}

export async function executeResponseCreate(
	this: IExecuteFunctions,
	i: number,
): Promise<IDataObject> {
	const model = this.getNodeParameter('model', i) as string;
	const input = this.getNodeParameter('input', i, '') as string;
	const options = this.getNodeParameter('options', i, {}) as IDataObject;
	if (!input) throw new NodeOperationError(this.getNode(), 'Input is empty', { itemIndex: i });
	const body: IDataObject = { model, input, background: true, store: true };
	if (typeof options.instructions === 'string' && options.instructions !== '') {
		body.instructions = options.instructions;
	}
	if (options.maxOutputTokens !== undefined) body.max_output_tokens = options.maxOutputTokens;
	if (options.temperature !== undefined) body.temperature = options.temperature;
	if (options.topP !== undefined) body.top_p = options.topP;
	return (await sllmApiRequest.call(this, {
		method: 'POST',
		path: '/responses',
		body,
		itemIndex: i,
	})) as IDataObject;
}

export async function executeResponseGet(this: IExecuteFunctions, i: number): Promise<IDataObject> {
	const responseId = String(this.getNodeParameter('responseId', i, '') ?? '').trim();
	if (!responseId) {
		throw new NodeOperationError(this.getNode(), 'Response ID is empty', { itemIndex: i });
	}
	const fetch = async () =>
		(await sllmApiRequest.call(this, {
			method: 'GET',
			path: `/responses/${encodeURIComponent(responseId)}`,
			itemIndex: i,
		})) as IDataObject;
	const wait = this.getNodeParameter('waitForCompletion', i, false) as boolean;
	const response = wait
		? await pollUntil(
				fetch,
				(r) => FINAL_RESPONSE_STATUSES.includes(String(r.status)),
				this.getNodeParameter('pollInterval', i, 5) as number,
				this.getNodeParameter('maxWait', i, 600) as number,
			)
		: await fetch();
	return { ...response, output_text: outputText(response) };
}
