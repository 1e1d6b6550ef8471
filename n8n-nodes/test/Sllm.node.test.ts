import type { IDataObject, IHttpRequestOptions } from 'n8n-workflow';
import { NodeApiError, NodeOperationError } from 'n8n-workflow';
import { afterEach, describe, expect, it, vi } from 'vitest';

import { Sllm } from '../nodes/Sllm/Sllm.node';
import { clock } from '../nodes/shared/poll';
import { BASE_URL, createContext, n8nHttpError, openAiError, routes } from './helpers';

const node = new Sllm();

function chatCompletion(content: string, extra: IDataObject = {}): IDataObject {
	return {
		id: 'chatcmpl-1',
		object: 'chat.completion',
		model: 'tiny-llama',
		choices: [
			{ index: 0, message: { role: 'assistant', content, ...extra }, finish_reason: 'stop' },
		],
		usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 },
	};
}

afterEach(() => {
	vi.restoreAllMocks();
});

describe('Sllm node description', () => {
	it('is usable as a tool and uses the sllm credentials', () => {
		expect(node.description.usableAsTool).toBe(true);
		expect(node.description.credentials).toEqual([{ name: 'sllmApi', required: true }]);
		const resource = node.description.properties.find((p) => p.name === 'resource');
		expect(resource?.options?.map((o) => (o as { value?: unknown }).value)).toEqual([
			'response',
			'batch',
			'chat',
			'completion',
			'textToSql',
		]);
	});
});

describe('Chat', () => {
	it('sends a prompt with a system message and sampling options to /chat/completions', async () => {
		const { execute, requests, credentialTypes } = createContext({
			params: {
				resource: 'chat',
				operation: 'complete',
				model: 'tiny-llama',
				inputType: 'prompt',
				prompt: 'Say hi',
				simplify: true,
				options: { systemMessage: 'Be brief', temperature: 0, maxTokens: 16, stop: 'END, STOP' },
			},
			http: routes({ 'POST /chat/completions': () => chatCompletion('Hi!') }),
		});

		const [out] = await node.execute.call(execute);

		expect(credentialTypes).toEqual(['sllmApi']);
		expect(requests[0].url).toBe(`${BASE_URL}/chat/completions`);
		expect(requests[0].json).toBe(true);
		expect(requests[0].body).toEqual({
			model: 'tiny-llama',
			messages: [
				{ role: 'system', content: 'Be brief' },
				{ role: 'user', content: 'Say hi' },
			],
			temperature: 0,
			max_tokens: 16,
			stop: ['END', 'STOP'],
		});
		expect(out).toEqual([
			{
				json: {
					content: 'Hi!',
					role: 'assistant',
					finish_reason: 'stop',
					model: 'tiny-llama',
					usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 },
					id: 'chatcmpl-1',
				},
				pairedItem: { item: 0 },
			},
		]);
	});

	it('sends a message list, asks for JSON, and returns the raw response when not simplified', async () => {
		const toolCalls = [
			{ id: 'call_1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } },
		];
		const { execute, requests } = createContext({
			params: {
				resource: 'chat',
				operation: 'complete',
				model: 'tiny-llama',
				inputType: 'messages',
				messages: {
					values: [
						{ role: 'system', content: 'You answer in JSON' },
						{ role: 'user', content: 'Give me an object' },
						{ role: 'assistant', content: '' },
					],
				},
				simplify: false,
				options: { responseFormat: 'json_object' },
			},
			http: () => chatCompletion('{"ok": true}', { tool_calls: toolCalls }),
		});

		const [out] = await node.execute.call(execute);

		expect(requests[0].body).toEqual({
			model: 'tiny-llama',
			messages: [
				{ role: 'system', content: 'You answer in JSON' },
				{ role: 'user', content: 'Give me an object' },
			],
			response_format: { type: 'json_object' },
		});
		expect(out[0].json).toEqual(chatCompletion('{"ok": true}', { tool_calls: toolCalls }));
	});

	it('keeps tool calls in the simplified output and handles one request per item', async () => {
		const toolCalls = [
			{ id: 'call_1', type: 'function', function: { name: 'lookup', arguments: '{}' } },
		];
		const { execute, requests } = createContext({
			items: [{ json: { q: 'a' } }, { json: { q: 'b' } }],
			params: {
				resource: 'chat',
				operation: 'complete',
				model: 'tiny-llama',
				inputType: 'prompt',
				prompt: (i: number) => ['first', 'second'][i],
				options: {},
			},
			http: () => chatCompletion('', { tool_calls: toolCalls }),
		});

		const [out] = await node.execute.call(execute);

		expect(requests.map((r) => (r.body as IDataObject).messages)).toEqual([
			[{ role: 'user', content: 'first' }],
			[{ role: 'user', content: 'second' }],
		]);
		expect(out.map((o) => o.pairedItem)).toEqual([{ item: 0 }, { item: 1 }]);
		expect(out[0].json.tool_calls).toEqual(toolCalls);
	});

	it('rejects an empty prompt without calling the server', async () => {
		const { execute, httpRequestWithAuthentication } = createContext({
			params: { resource: 'chat', operation: 'complete', model: 'm', prompt: '', options: {} },
		});
		await expect(node.execute.call(execute)).rejects.toThrow(NodeOperationError);
		expect(httpRequestWithAuthentication).not.toHaveBeenCalled();
	});
});

describe('Complete', () => {
	it('sends the prompt to /completions and returns the text', async () => {
		const { execute, requests } = createContext({
			params: {
				resource: 'completion',
				operation: 'create',
				model: 'tiny-llama',
				prompt: 'SELECT',
				simplify: true,
				options: { maxTokens: 128, topP: 0.9, seed: 7 },
			},
			http: routes({
				'POST /completions': () => ({
					id: 'cmpl-1',
					object: 'text_completion',
					model: 'tiny-llama',
					choices: [{ index: 0, text: ' * FROM t;', finish_reason: 'stop' }],
					usage: { prompt_tokens: 1, completion_tokens: 4, total_tokens: 5 },
				}),
			}),
		});

		const [out] = await node.execute.call(execute);

		expect(requests[0].body).toEqual({
			model: 'tiny-llama',
			prompt: 'SELECT',
			max_tokens: 128,
			top_p: 0.9,
			seed: 7,
		});
		expect(out[0].json).toEqual({
			text: ' * FROM t;',
			finish_reason: 'stop',
			model: 'tiny-llama',
			usage: { prompt_tokens: 1, completion_tokens: 4, total_tokens: 5 },
			id: 'cmpl-1',
		});
	});
});

describe('Text-to-SQL', () => {
	const answer = {
		sql: 'SELECT name, total FROM sales LIMIT 2',
		columns: ['name', 'total'],
		rows: [
			['apples', 10],
			['pears', 4],
		],
	};

	it('posts source, question, execute and max_rows and returns sql, columns and rows', async () => {
		const { execute, requests } = createContext({
			params: {
				resource: 'textToSql',
				operation: 'generate',
				source: 'sales',
				question: 'Top products?',
				execute: true,
				maxRows: 2,
				output: 'result',
				options: { model: 'sql-model' },
			},
			http: routes({ 'POST /text2sql': () => answer }),
		});

		const [out] = await node.execute.call(execute);

		expect(requests[0].body).toEqual({
			source: 'sales',
			question: 'Top products?',
			execute: true,
			max_rows: 2,
			model: 'sql-model',
		});
		expect(out).toEqual([{ json: answer, pairedItem: { item: 0 } }]);
	});

	it('returns one item per row keyed by column name', async () => {
		const { execute } = createContext({
			params: {
				resource: 'textToSql',
				operation: 'generate',
				source: 'sales',
				question: 'Top products?',
				execute: true,
				maxRows: 10,
				output: 'rows',
				options: {},
			},
			http: () => answer,
		});

		const [out] = await node.execute.call(execute);

		expect(out).toEqual([
			{ json: { name: 'apples', total: 10 }, pairedItem: { item: 0 } },
			{ json: { name: 'pears', total: 4 }, pairedItem: { item: 0 } },
		]);
	});

	it('only asks for SQL when execute is off', async () => {
		const { execute, requests } = createContext({
			params: {
				resource: 'textToSql',
				operation: 'generate',
				source: 'sales',
				question: 'How many orders?',
				execute: false,
				maxRows: 10,
				options: {},
			},
			http: () => ({ sql: 'SELECT count(*) FROM orders' }),
		});

		const [out] = await node.execute.call(execute);

		expect(requests[0].body).toEqual({
			source: 'sales',
			question: 'How many orders?',
			execute: false,
		});
		expect(out[0].json).toEqual({ sql: 'SELECT count(*) FROM orders', columns: [], rows: [] });
	});
});

function multipartParts(body: Buffer, contentType: string) {
	const boundary = /boundary=(.+)$/.exec(contentType)?.[1];
	expect(boundary).toBeTruthy();
	return body
		.toString('utf8')
		.split(`--${boundary}`)
		.slice(1, -1)
		.map((part) => {
			const [head, ...rest] = part.replace(/^\r\n/, '').split('\r\n\r\n');
			return { head, content: rest.join('\r\n\r\n').replace(/\r\n$/, '') };
		});
}

describe('Batch', () => {
	it('creates a batch from the input items: JSONL upload to /files, then /batches', async () => {
		const { execute, requests } = createContext({
			items: [{ json: { question: 'one' } }, { json: { question: 'two' } }],
			params: {
				resource: 'batch',
				operation: 'create',
				endpoint: '/v1/chat/completions',
				model: 'tiny-llama',
				prompt: (i: number) => ['one', 'two'][i],
				customId: (i: number) => (i === 0 ? 'row-a' : ''),
				options: { maxTokens: 32, systemMessage: 'Answer briefly', description: 'nightly' },
			},
			http: routes({
				'POST /files': () => ({ id: 'file-in', object: 'file', purpose: 'batch' }),
				'POST /batches': () => ({ id: 'batch_1', object: 'batch', status: 'validating' }),
			}),
		});

		const [out] = await node.execute.call(execute);

		expect(requests.map((r) => `${r.method} ${r.url}`)).toEqual([
			`POST ${BASE_URL}/files`,
			`POST ${BASE_URL}/batches`,
		]);
		const upload = requests[0];
		const contentType = String((upload.headers as IDataObject)['Content-Type']);
		expect(contentType).toMatch(/^multipart\/form-data; boundary=/);
		expect(Buffer.isBuffer(upload.body)).toBe(true);
		expect(upload.json).toBe(false);
		const parts = multipartParts(upload.body as Buffer, contentType);
		expect(parts[0]).toEqual({
			head: 'Content-Disposition: form-data; name="purpose"',
			content: 'batch',
		});
		expect(parts[1].head).toMatch(/name="file"; filename="n8n-batch-\d+\.jsonl"/);
		expect(parts[1].head).toContain('Content-Type: application/jsonl');
		const lines = parts[1].content
			.trim()
			.split('\n')
			.map((l) => JSON.parse(l));
		expect(lines).toEqual([
			{
				custom_id: 'row-a',
				method: 'POST',
				url: '/v1/chat/completions',
				body: {
					model: 'tiny-llama',
					max_tokens: 32,
					messages: [
						{ role: 'system', content: 'Answer briefly' },
						{ role: 'user', content: 'one' },
					],
				},
			},
			{
				custom_id: 'item-1',
				method: 'POST',
				url: '/v1/chat/completions',
				body: {
					model: 'tiny-llama',
					max_tokens: 32,
					messages: [
						{ role: 'system', content: 'Answer briefly' },
						{ role: 'user', content: 'two' },
					],
				},
			},
		]);
		expect(requests[1].body).toEqual({
			input_file_id: 'file-in',
			endpoint: '/v1/chat/completions',
			completion_window: '24h',
			metadata: { description: 'nightly' },
		});
		expect(out).toEqual([
			{
				json: { id: 'batch_1', object: 'batch', status: 'validating', request_count: 2 },
				pairedItem: [{ item: 0 }, { item: 1 }],
			},
		]);
	});

	it('builds completions lines for the /v1/completions endpoint', async () => {
		const { execute, requests } = createContext({
			params: {
				resource: 'batch',
				operation: 'create',
				endpoint: '/v1/completions',
				model: 'tiny-llama',
				prompt: 'SELECT',
				customId: '',
				options: {},
			},
			http: routes({
				'POST /files': () => ({ id: 'file-in' }),
				'POST /batches': () => ({ id: 'batch_2' }),
			}),
		});
		await node.execute.call(execute);
		const contentType = String((requests[0].headers as IDataObject)['Content-Type']);
		const line = JSON.parse(multipartParts(requests[0].body as Buffer, contentType)[1].content);
		expect(line).toEqual({
			custom_id: 'item-0',
			method: 'POST',
			url: '/v1/completions',
			body: { model: 'tiny-llama', prompt: 'SELECT' },
		});
		expect((requests[1].body as IDataObject).endpoint).toBe('/v1/completions');
	});

	it('refuses duplicate custom IDs before uploading anything', async () => {
		const { execute, httpRequestWithAuthentication } = createContext({
			items: [{ json: {} }, { json: {} }],
			params: {
				resource: 'batch',
				operation: 'create',
				model: 'm',
				prompt: 'p',
				customId: 'same',
				options: {},
			},
		});
		await expect(node.execute.call(execute)).rejects.toThrow('Custom IDs must be unique');
		expect(httpRequestWithAuthentication).not.toHaveBeenCalled();
	});

	it('gets a batch', async () => {
		const { execute, requests } = createContext({
			params: { resource: 'batch', operation: 'get', batchId: 'batch_1' },
			http: routes({ 'GET /batches/batch_1': () => ({ id: 'batch_1', status: 'in_progress' }) }),
		});
		const [out] = await node.execute.call(execute);
		expect(requests[0].method).toBe('GET');
		expect(out[0].json).toEqual({ id: 'batch_1', status: 'in_progress' });
	});

	it('polls a batch until it reaches a final status when asked to wait', async () => {
		const sleep = vi.spyOn(clock, 'sleep').mockResolvedValue(undefined);
		const statuses = ['validating', 'in_progress', 'completed'];
		const { execute, requests } = createContext({
			params: {
				resource: 'batch',
				operation: 'get',
				batchId: 'batch_1',
				waitForCompletion: true,
				pollInterval: 2,
				maxWait: 60,
			},
			http: () => ({ id: 'batch_1', status: statuses.shift() }),
		});
		const [out] = await node.execute.call(execute);
		expect(requests).toHaveLength(3);
		expect(sleep).toHaveBeenCalledTimes(2);
		expect(sleep).toHaveBeenCalledWith(2000);
		expect(out[0].json.status).toBe('completed');
	});

	it('downloads the output and error files and turns each JSONL line into an item', async () => {
		const output = [
			{
				id: 'r1',
				custom_id: 'row-a',
				response: {
					status_code: 200,
					body: chatCompletion('Answer A'),
				},
				error: null,
			},
			{
				id: 'r2',
				custom_id: 'item-1',
				response: {
					status_code: 200,
					body: {
						object: 'text_completion',
						choices: [{ text: 'Answer B', finish_reason: 'length' }],
						usage: { total_tokens: 3 },
					},
				},
				error: null,
			},
		];
		const errors = [
			{
				id: 'r3',
				custom_id: 'item-2',
				response: {
					status_code: 400,
					body: openAiError('prompt too long', 'invalid_request_error'),
				},
				error: null,
			},
		];
		const toJsonl = (lines: IDataObject[]) => lines.map((l) => JSON.stringify(l)).join('\n') + '\n';
		const { execute, requests } = createContext({
			params: { resource: 'batch', operation: 'getResults', batchId: 'batch_1', simplify: true },
			http: routes({
				'GET /batches/batch_1': () => ({
					id: 'batch_1',
					status: 'completed',
					output_file_id: 'file-out',
					error_file_id: 'file-err',
				}),
				'GET /files/file-out/content': () => toJsonl(output),
				'GET /files/file-err/content': () => toJsonl(errors),
			}),
		});

		const [out] = await node.execute.call(execute);

		expect(requests[1].encoding).toBe('text');
		expect(requests[1].json).toBe(false);
		expect(out.map((o) => o.json)).toEqual([
			{
				custom_id: 'row-a',
				status_code: 200,
				content: 'Answer A',
				finish_reason: 'stop',
				usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 },
				error: null,
				source: 'output',
			},
			{
				custom_id: 'item-1',
				status_code: 200,
				content: 'Answer B',
				finish_reason: 'length',
				usage: { total_tokens: 3 },
				error: null,
				source: 'output',
			},
			{
				custom_id: 'item-2',
				status_code: 400,
				content: null,
				finish_reason: null,
				usage: null,
				error: {
					message: 'prompt too long',
					type: 'invalid_request_error',
					param: null,
					code: null,
				},
				source: 'error',
			},
		]);
		expect(out.every((o) => (o.pairedItem as { item?: number }).item === 0)).toBe(true);
	});

	it('returns raw lines when not simplified, and copes with a body that arrived parsed', async () => {
		const line = { id: 'r1', custom_id: 'only', response: { status_code: 200, body: {} } };
		const { execute } = createContext({
			params: {
				resource: 'batch',
				operation: 'getResults',
				batchId: 'batch_1',
				simplify: false,
				includeErrors: false,
			},
			http: routes({
				'GET /batches/batch_1': () => ({ id: 'batch_1', status: 'completed', output_file_id: 'f' }),
				'GET /files/f/content': () => line,
			}),
		});
		const [out] = await node.execute.call(execute);
		expect(out.map((o) => o.json)).toEqual([{ ...line, source: 'output' }]);
	});

	it('explains that a running batch has no results yet', async () => {
		const { execute } = createContext({
			params: { resource: 'batch', operation: 'getResults', batchId: 'batch_1' },
			http: () => ({ id: 'batch_1', status: 'in_progress', output_file_id: null }),
		});
		await expect(node.execute.call(execute)).rejects.toThrow(
			'Batch batch_1 has no output file yet (status: in_progress)',
		);
	});
});

describe('Background response', () => {
	it('creates a response with background: true', async () => {
		const { execute, requests } = createContext({
			params: {
				resource: 'response',
				operation: 'create',
				model: 'tiny-llama',
				input: 'Write a haiku',
				options: { instructions: 'Be poetic', maxOutputTokens: 64, temperature: 0.2 },
			},
			http: routes({
				'POST /responses': () => ({ id: 'resp_1', object: 'response', status: 'queued' }),
			}),
		});
		const [out] = await node.execute.call(execute);
		expect(requests[0].body).toEqual({
			model: 'tiny-llama',
			input: 'Write a haiku',
			background: true,
			store: true,
			instructions: 'Be poetic',
			max_output_tokens: 64,
			temperature: 0.2,
		});
		expect(out[0].json).toEqual({ id: 'resp_1', object: 'response', status: 'queued' });
	});

	it('gets a response and adds output_text', async () => {
		const { execute, requests } = createContext({
			params: { resource: 'response', operation: 'get', responseId: 'resp_1' },
			http: routes({
				'GET /responses/resp_1': () => ({
					id: 'resp_1',
					status: 'completed',
					output: [
						{
							type: 'message',
							role: 'assistant',
							content: [
								{ type: 'output_text', text: 'Old pond, ' },
								{ type: 'output_text', text: 'a frog jumps in.' },
							],
						},
					],
				}),
			}),
		});
		const [out] = await node.execute.call(execute);
		expect(requests[0].method).toBe('GET');
		expect(out[0].json.output_text).toBe('Old pond, a frog jumps in.');
		expect(out[0].json.status).toBe('completed');
	});

	it('stops waiting at the deadline and returns the last status', async () => {
		let now = 0;
		vi.spyOn(clock, 'now').mockImplementation(() => now);
		vi.spyOn(clock, 'sleep').mockImplementation(async (ms: number) => {
			now += ms;
		});
		const { execute, requests } = createContext({
			params: {
				resource: 'response',
				operation: 'get',
				responseId: 'resp_1',
				waitForCompletion: true,
				pollInterval: 5,
				maxWait: 12,
			},
			http: () => ({ id: 'resp_1', status: 'in_progress', output: [] }),
		});
		const [out] = await node.execute.call(execute);
		// t=0, 5, 10, 12 (the last sleep is cut to the deadline)
		expect(requests).toHaveLength(4);
		expect(out[0].json).toEqual({
			id: 'resp_1',
			status: 'in_progress',
			output: [],
			output_text: null,
		});
	});
});

describe('Errors', () => {
	const chatParams = {
		resource: 'chat',
		operation: 'complete',
		model: 'nope',
		inputType: 'prompt',
		prompt: 'hi',
		options: {},
	};

	it("surfaces the server's OpenAI-shaped error as a NodeApiError with its message", async () => {
		const { execute } = createContext({
			params: chatParams,
			http: () => {
				throw n8nHttpError(
					404,
					openAiError(
						'The model `nope` does not exist.',
						'invalid_request_error',
						'model',
						'model_not_found',
					),
				);
			},
		});
		const error = await node.execute.call(execute).catch((e: unknown) => e);
		expect(error).toBeInstanceOf(NodeApiError);
		const apiError = error as NodeApiError;
		expect(apiError.message).toBe('The model `nope` does not exist.');
		expect(apiError.httpCode).toBe('404');
		expect(apiError.description).toBe(
			'invalid_request_error (param: model, code: model_not_found) [HTTP 404]',
		);
		expect(apiError.context.itemIndex).toBe(0);
	});

	it('continues on fail with an error item and keeps processing the other items', async () => {
		let call = 0;
		const { execute } = createContext({
			items: [{ json: {} }, { json: {} }],
			params: chatParams,
			continueOnFail: true,
			http: () => {
				call += 1;
				if (call === 1) {
					throw n8nHttpError(
						400,
						openAiError('max_tokens is too large', 'invalid_request_error', 'max_tokens'),
					);
				}
				return chatCompletion('fine');
			},
		});
		const [out] = await node.execute.call(execute);
		expect(out).toEqual([
			{
				json: {
					error: 'max_tokens is too large',
					description: 'invalid_request_error (param: max_tokens) [HTTP 400]',
					httpCode: 400,
					type: 'invalid_request_error',
					param: 'max_tokens',
				},
				pairedItem: { item: 0 },
			},
			expect.objectContaining({
				json: expect.objectContaining({ content: 'fine' }),
				pairedItem: { item: 1 },
			}),
		]);
	});

	it('continues on fail for validation errors too', async () => {
		const { execute } = createContext({
			params: { ...chatParams, prompt: '' },
			continueOnFail: true,
		});
		const [out] = await node.execute.call(execute);
		expect(out).toEqual([{ json: { error: 'The prompt is empty' }, pairedItem: { item: 0 } }]);
	});

	it('returns one error item for a failed batch creation when continuing on fail', async () => {
		const { execute } = createContext({
			items: [{ json: {} }, { json: {} }],
			params: { resource: 'batch', operation: 'create', model: 'm', prompt: 'p', options: {} },
			continueOnFail: true,
			http: routes({
				'POST /files': () => {
					throw n8nHttpError(413, openAiError('File too large', 'invalid_request_error', 'file'));
				},
			}),
		});
		const [out] = await node.execute.call(execute);
		expect(out).toEqual([
			{
				json: expect.objectContaining({ error: 'File too large', httpCode: 413 }),
				pairedItem: [{ item: 0 }, { item: 1 }],
			},
		]);
	});

	it.each([
		[
			'an axios error that was not wrapped',
			() => {
				const error = new Error('Request failed with status code 429') as Error & IDataObject;
				error.response = {
					status: 429,
					data: openAiError('Too many requests', 'rate_limit_error'),
				};
				return error;
			},
			{ message: 'Too many requests', httpCode: '429' },
		],
		[
			'a text body (file download)',
			() => {
				const error = new Error('Request failed with status code 404') as Error & IDataObject;
				error.response = {
					status: 404,
					data: JSON.stringify(openAiError('No such file: file-x', 'invalid_request_error')),
				};
				return error;
			},
			{ message: 'No such file: file-x', httpCode: '404' },
		],
		[
			"FastAPI's validation error",
			() =>
				n8nHttpError(422, {
					detail: [{ loc: ['body', 'question'], msg: 'Field required', type: 'missing' }],
				}),
			{ message: 'body.question: Field required', httpCode: '422' },
		],
		[
			'a refused connection',
			() => {
				const error = new Error('connect ECONNREFUSED 127.0.0.1:8000') as Error & IDataObject;
				error.code = 'ECONNREFUSED';
				return error;
			},
			{ message: undefined, httpCode: null },
		],
	])(
		'maps %s',
		async (_name, makeError, expected: { message?: string; httpCode: string | null }) => {
			const { execute } = createContext({
				params: chatParams,
				http: () => {
					throw makeError();
				},
			});
			const error = (await node.execute.call(execute).catch((e: unknown) => e)) as NodeApiError;
			expect(error).toBeInstanceOf(NodeApiError);
			expect(error.httpCode ?? null).toBe(expected.httpCode);
			if (expected.message) expect(error.message).toBe(expected.message);
			else expect(error.message).toMatch(/refused|ECONNREFUSED/i);
		},
	);
});

describe('Model list', () => {
	it('loads the models from GET /models, sorted', async () => {
		const { loadOptions, requests } = createContext({
			params: {},
			credentials: { baseUrl: 'http://other:9000/v1//', apiKey: '' },
			http: (options: IHttpRequestOptions) => {
				expect(options.url).toBe('http://other:9000/v1/models');
				return { object: 'list', data: [{ id: 'zeta' }, { id: 'alpha' }] };
			},
		});
		const options = await node.methods.loadOptions.getModels.call(loadOptions);
		expect(requests[0].method).toBe('GET');
		expect(options).toEqual([
			{ name: 'alpha', value: 'alpha' },
			{ name: 'zeta', value: 'zeta' },
		]);
	});
});
