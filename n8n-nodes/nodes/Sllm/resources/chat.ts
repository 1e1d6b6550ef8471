import type { IDataObject, IExecuteFunctions, INodeProperties } from 'n8n-workflow';
import { NodeOperationError } from 'n8n-workflow';

import { sllmApiRequest } from '../../shared/transport';
import { modelProperty, samplingBody, simplifyProperty, withSamplingOptions } from './common';

const show = { resource: ['chat'], operation: ['complete'] };

export const chatOperations: INodeProperties = {
	displayName: 'Operation',
	name: 'operation',
	type: 'options',
	noDataExpression: true,
	displayOptions: { show: { resource: ['chat'] } },
	options: [
		{
			name: 'Message a Model',
			value: 'complete',
			action: 'Message a model',
			description: 'Send chat messages to POST /chat/completions',
		},
	],
	default: 'complete',
};

export const chatFields: INodeProperties[] = [
	modelProperty('chat', ['complete']),
	{
		displayName: 'Input',
		name: 'inputType',
		type: 'options',
		options: [
			{
				name: 'Prompt',
				value: 'prompt',
				description: 'A single user message, with an optional system message',
			},
			{
				name: 'Messages',
				value: 'messages',
				description: 'A list of messages with roles',
			},
		],
		default: 'prompt',
		displayOptions: { show },
	},
	{
		displayName: 'Prompt',
		name: 'prompt',
		type: 'string',
		typeOptions: { rows: 4 },
		default: '',
		required: true,
		placeholder: 'e.g. Summarise this text in one sentence: ...',
		description: 'The user message',
		displayOptions: { show: { ...show, inputType: ['prompt'] } },
	},
	{
		displayName: 'Messages',
		name: 'messages',
		type: 'fixedCollection',
		typeOptions: { multipleValues: true, sortable: true },
		default: { values: [{ role: 'user', content: '' }] },
		placeholder: 'Add Message',
		displayOptions: { show: { ...show, inputType: ['messages'] } },
		options: [
			{
				displayName: 'Message',
				name: 'values',
				values: [
					{
						displayName: 'Role',
						name: 'role',
						type: 'options',
						options: [
							{ name: 'Assistant', value: 'assistant' },
							{ name: 'System', value: 'system' },
							{ name: 'User', value: 'user' },
						],
						default: 'user',
					},
					{
						displayName: 'Content',
						name: 'content',
						type: 'string',
						typeOptions: { rows: 2 },
						default: '',
					},
				],
			},
		],
	},
	simplifyProperty('chat', ['complete']),
	{
		displayName: 'Options',
		name: 'options',
		type: 'collection',
		placeholder: 'Add Option',
		default: {},
		displayOptions: { show },
		options: withSamplingOptions([
			{
				displayName: 'Response Format',
				name: 'responseFormat',
				type: 'options',
				options: [
					{
						name: 'JSON Object',
						value: 'json_object',
						description: 'The server constrains decoding so the reply is valid JSON',
					},
					{ name: 'Text', value: 'text' },
				],
				default: 'text',
			},
			{
				displayName: 'System Message',
				name: 'systemMessage',
				type: 'string',
				typeOptions: { rows: 2 },
				default: '',
				description: 'Sent before the prompt (only used with the Prompt input)',
			},
		]),
	},
];

export function buildChatMessages(this: IExecuteFunctions, i: number): IDataObject[] {
	const inputType = this.getNodeParameter('inputType', i, 'prompt') as string;
	const options = this.getNodeParameter('options', i, {}) as IDataObject;
	if (inputType === 'messages') {
		const collection = this.getNodeParameter('messages', i, {}) as {
			values?: Array<{ role?: string; content?: string }>;
		};
		const messages = (collection.values ?? [])
			.filter((m) => (m.content ?? '') !== '')
			.map((m) => ({ role: m.role ?? 'user', content: m.content ?? '' }));
		if (messages.length === 0) {
			throw new NodeOperationError(this.getNode(), 'Add at least one message with content', {
				itemIndex: i,
			});
		}
		return messages;
	}
	const prompt = this.getNodeParameter('prompt', i, '') as string;
	if (!prompt) {
		throw new NodeOperationError(this.getNode(), 'The prompt is empty', { itemIndex: i });
	}
	const messages: IDataObject[] = [];
	if (typeof options.systemMessage === 'string' && options.systemMessage !== '') {
		messages.push({ role: 'system', content: options.systemMessage });
	}
	messages.push({ role: 'user', content: prompt });
	return messages;
}

export function simplifyChatCompletion(response: IDataObject): IDataObject {
	const choices = Array.isArray(response.choices) ? (response.choices as IDataObject[]) : [];
	const first = choices[0] ?? {};
	const message = (first.message ?? {}) as IDataObject;
	const result: IDataObject = {
		content: message.content ?? null,
		role: message.role ?? 'assistant',
		finish_reason: first.finish_reason ?? null,
		model: response.model,
		usage: response.usage,
		id: response.id,
	};
	if (Array.isArray(message.tool_calls) && message.tool_calls.length > 0) {
		result.tool_calls = message.tool_calls;
	}
	if (choices.length > 1) {
		result.choices = choices.map((c) => ((c.message ?? {}) as IDataObject).content ?? null);
	}
	return result;
}

export async function executeChat(this: IExecuteFunctions, i: number): Promise<IDataObject> {
	const model = this.getNodeParameter('model', i) as string;
	const options = this.getNodeParameter('options', i, {}) as IDataObject;
	const simplify = this.getNodeParameter('simplify', i, true) as boolean;
	const body: IDataObject = {
		model,
		messages: buildChatMessages.call(this, i),
		...samplingBody(options),
	};
	if (options.responseFormat === 'json_object') {
		body.response_format = { type: 'json_object' };
	}
	const response = (await sllmApiRequest.call(this, {
		method: 'POST',
		path: '/chat/completions',
		body,
		itemIndex: i,
	})) as IDataObject;
	return simplify ? simplifyChatCompletion(response) : response;
}
