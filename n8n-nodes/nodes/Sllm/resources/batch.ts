import type { IDataObject, IExecuteFunctions, INodeProperties } from 'n8n-workflow';
import { NodeOperationError } from 'n8n-workflow';

import { parseJsonl, toJsonl } from '../../shared/jsonl';
import { buildMultipart } from '../../shared/multipart';
import { pollUntil } from '../../shared/poll';
import { sllmApiRequest } from '../../shared/transport';
import {
	modelProperty,
	samplingBody,
	simplifyProperty,
	waitOptions,
	withSamplingOptions,
} from './common';

const FINAL_BATCH_STATUSES = ['completed', 'failed', 'expired', 'cancelled'];

export const batchOperations: INodeProperties = {
	displayName: 'Operation',
	name: 'operation',
	type: 'options',
	noDataExpression: true,
	displayOptions: { show: { resource: ['batch'] } },
	options: [
		{
			name: 'Create',
			value: 'create',
			action: 'Create a batch from input items',
			description:
				'Upload one request per input item as a JSONL file (POST /files) and start a batch (POST /batches)',
		},
		{
			name: 'Get',
			value: 'get',
			action: 'Get a batch',
			description: 'Get the status of a batch (GET /batches/{ID})',
		},
		{
			name: 'Get Results',
			value: 'getResults',
			action: 'Get the results of a batch',
			description: "Download the batch's output file and return one item per request",
		},
	],
	default: 'create',
};

const create = { resource: ['batch'], operation: ['create'] };

export const batchFields: INodeProperties[] = [
	{
		displayName: 'Endpoint',
		name: 'endpoint',
		type: 'options',
		options: [
			{ name: 'Chat Completions', value: '/v1/chat/completions' },
			{ name: 'Completions', value: '/v1/completions' },
		],
		default: '/v1/chat/completions',
		description: 'API each request of the batch is sent to',
		displayOptions: { show: create },
	},
	modelProperty('batch', ['create']),
	{
		displayName: 'Prompt',
		name: 'prompt',
		type: 'string',
		typeOptions: { rows: 3 },
		default: '',
		required: true,
		placeholder: 'e.g. {{ $json.question }}',
		description: 'Prompt of each request; map it from the input item with an expression',
		displayOptions: { show: create },
	},
	{
		displayName: 'Custom ID',
		name: 'customId',
		type: 'string',
		default: '',
		placeholder: 'e.g. {{ $json.key }}',
		description:
			'Identifier of each request, echoed back in the results; empty uses item-&lt;index&gt;',
		displayOptions: { show: create },
	},
	{
		displayName: 'Options',
		name: 'options',
		type: 'collection',
		placeholder: 'Add Option',
		default: {},
		displayOptions: { show: create },
		options: withSamplingOptions([
			{
				displayName: 'Completion Window',
				name: 'completionWindow',
				type: 'string',
				default: '24h',
				description: 'Time frame within which the batch should be processed',
			},
			{
				displayName: 'Description',
				name: 'description',
				type: 'string',
				default: '',
				description: 'Stored as metadata.description on the batch',
			},
			{
				displayName: 'System Message',
				name: 'systemMessage',
				type: 'string',
				typeOptions: { rows: 2 },
				default: '',
				description: 'Sent before each prompt (chat completions only)',
			},
		]),
	},
	{
		displayName: 'Batch ID',
		name: 'batchId',
		type: 'string',
		default: '',
		required: true,
		placeholder: 'e.g. batch_abc123',
		displayOptions: { show: { resource: ['batch'], operation: ['get', 'getResults'] } },
	},
	...waitOptions('batch', ['get']),
	simplifyProperty('batch', ['getResults']),
	{
		displayName: 'Include Failed Requests',
		name: 'includeErrors',
		type: 'boolean',
		default: true,
		description: "Whether to also return the lines of the batch's error file",
		displayOptions: { show: { resource: ['batch'], operation: ['getResults'] } },
	},
];

/** One line of the batch input file for input item `i`. */
export function batchLine(this: IExecuteFunctions, i: number): IDataObject {
	const endpoint = this.getNodeParameter('endpoint', i, '/v1/chat/completions') as string;
	const model = this.getNodeParameter('model', i) as string;
	const prompt = this.getNodeParameter('prompt', i, '') as string;
	const customId = (this.getNodeParameter('customId', i, '') as string) || `item-${i}`;
	const options = this.getNodeParameter('options', i, {}) as IDataObject;
	if (!prompt) {
		throw new NodeOperationError(this.getNode(), `The prompt of item ${i} is empty`, {
			itemIndex: i,
		});
	}
	const body: IDataObject = { model, ...samplingBody(options) };
	if (endpoint === '/v1/completions') {
		body.prompt = prompt;
	} else {
		const messages: IDataObject[] = [];
		if (typeof options.systemMessage === 'string' && options.systemMessage !== '') {
			messages.push({ role: 'system', content: options.systemMessage });
		}
		messages.push({ role: 'user', content: prompt });
		body.messages = messages;
	}
	return { custom_id: String(customId), method: 'POST', url: endpoint, body };
}

/** Batch create: all input items become one JSONL file and one batch. */
export async function executeBatchCreate(this: IExecuteFunctions): Promise<IDataObject> {
	const items = this.getInputData();
	const lines = items.map((_, i) => batchLine.call(this, i));
	if (lines.length === 0) {
		throw new NodeOperationError(this.getNode(), 'No input items to put into a batch');
	}
	const customIds = new Set(lines.map((line) => line.custom_id));
	if (customIds.size !== lines.length) {
		throw new NodeOperationError(this.getNode(), 'Custom IDs must be unique within a batch', {
			description: 'Leave Custom ID empty to use item-<index>, or map it to a unique field',
		});
	}

	const endpoint = this.getNodeParameter('endpoint', 0, '/v1/chat/completions') as string;
	const options = this.getNodeParameter('options', 0, {}) as IDataObject;
	const multipart = buildMultipart(
		{ purpose: 'batch' },
		{
			field: 'file',
			filename: `n8n-batch-${Date.now()}.jsonl`,
			contentType: 'application/jsonl',
			content: toJsonl(lines),
		},
	);
	const file = (await sllmApiRequest.call(this, {
		method: 'POST',
		path: '/files',
		body: multipart.body,
		headers: { 'Content-Type': multipart.contentType },
	})) as IDataObject;
	if (!file?.id) {
		throw new NodeOperationError(
			this.getNode(),
			'The server did not return a file ID for the upload',
		);
	}

	const batchBody: IDataObject = {
		input_file_id: file.id,
		endpoint,
		completion_window: (options.completionWindow as string) || '24h',
	};
	if (typeof options.description === 'string' && options.description !== '') {
		batchBody.metadata = { description: options.description };
	}
	const batch = (await sllmApiRequest.call(this, {
		method: 'POST',
		path: '/batches',
		body: batchBody,
	})) as IDataObject;
	return { ...batch, request_count: lines.length };
}

async function getBatch(this: IExecuteFunctions, batchId: string, i: number): Promise<IDataObject> {
	return (await sllmApiRequest.call(this, {
		method: 'GET',
		path: `/batches/${encodeURIComponent(batchId)}`,
		itemIndex: i,
	})) as IDataObject;
}

function requireBatchId(this: IExecuteFunctions, i: number): string {
	const batchId = String(this.getNodeParameter('batchId', i, '') ?? '').trim();
	if (!batchId) throw new NodeOperationError(this.getNode(), 'Batch ID is empty', { itemIndex: i });
	return batchId;
}

export async function executeBatchGet(this: IExecuteFunctions, i: number): Promise<IDataObject> {
	const batchId = requireBatchId.call(this, i);
	if (!(this.getNodeParameter('waitForCompletion', i, false) as boolean)) {
		return await getBatch.call(this, batchId, i);
	}
	const interval = this.getNodeParameter('pollInterval', i, 5) as number;
	const maxWait = this.getNodeParameter('maxWait', i, 600) as number;
	return await pollUntil(
		async () => await getBatch.call(this, batchId, i),
		(batch) => FINAL_BATCH_STATUSES.includes(String(batch.status)),
		interval,
		maxWait,
	);
}

function simplifyResultLine(line: IDataObject): IDataObject {
	const response = (line.response ?? {}) as IDataObject;
	const body = (response.body ?? {}) as IDataObject;
	const choices = Array.isArray(body.choices) ? (body.choices as IDataObject[]) : [];
	const first = choices[0] ?? {};
	const message = (first.message ?? {}) as IDataObject;
	return {
		custom_id: line.custom_id ?? null,
		status_code: response.status_code ?? null,
		content: message.content ?? first.text ?? null,
		finish_reason: first.finish_reason ?? null,
		usage: body.usage ?? null,
		error: line.error ?? body.error ?? null,
	};
}

async function downloadJsonl(
	this: IExecuteFunctions,
	fileId: string,
	i: number,
	source: string,
	simplify: boolean,
): Promise<IDataObject[]> {
	const content = await sllmApiRequest.call(this, {
		method: 'GET',
		path: `/files/${encodeURIComponent(fileId)}/content`,
		responseType: 'text',
		itemIndex: i,
	});
	return parseJsonl(content).map((line) => {
		if (!line.value) {
			return { source, line: line.line, error: line.error ?? 'Unreadable line', raw: line.raw };
		}
		return simplify ? { ...simplifyResultLine(line.value), source } : { ...line.value, source };
	});
}

export async function executeBatchResults(
	this: IExecuteFunctions,
	i: number,
): Promise<IDataObject[]> {
	const batchId = requireBatchId.call(this, i);
	const simplify = this.getNodeParameter('simplify', i, true) as boolean;
	const includeErrors = this.getNodeParameter('includeErrors', i, true) as boolean;
	const batch = await getBatch.call(this, batchId, i);
	const outputFileId = batch.output_file_id as string | undefined;
	const errorFileId = batch.error_file_id as string | undefined;
	if (!outputFileId && !(includeErrors && errorFileId)) {
		throw new NodeOperationError(
			this.getNode(),
			`Batch ${batchId} has no output file yet (status: ${String(batch.status)})`,
			{
				itemIndex: i,
				description:
					'Use the Get operation with "Wait for Completion" first, or run this node again later',
			},
		);
	}
	const results: IDataObject[] = [];
	if (outputFileId) {
		results.push(...(await downloadJsonl.call(this, outputFileId, i, 'output', simplify)));
	}
	if (includeErrors && errorFileId) {
		results.push(...(await downloadJsonl.call(this, errorFileId, i, 'error', simplify)));
	}
	return results;
}
