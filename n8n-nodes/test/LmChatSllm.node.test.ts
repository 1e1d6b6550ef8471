/* Tests may use Node's own modules (a local HTTP server stands in for sllm); the shipped code may not. */
/* eslint-disable @n8n/community-nodes/no-restricted-imports */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

import type { IDataObject } from 'n8n-workflow';
import { NodeConnectionTypes, NodeOperationError } from 'n8n-workflow';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';

import { LmChatSllm } from '../nodes/LmChatSllm/LmChatSllm.node';
import type { ChatModelBackends, LangchainHost } from '../nodes/LmChatSllm/runtime';
import {
	createTracingHandler,
	defaultBackends,
	supplySllmChatModel,
} from '../nodes/LmChatSllm/runtime';
import { createContext, testNode } from './helpers';

const params = {
	model: 'tiny-llama',
	options: { temperature: 0.1, maxTokens: 64, topP: 0.9, timeout: 5000, maxRetries: 0 },
};

afterEach(() => {
	LmChatSllm.backends = defaultBackends;
});

describe('Sllm Chat Model description', () => {
	it('is a chat-model sub-node with a model list from /models', () => {
		const { description } = new LmChatSllm();
		expect(description.inputs).toEqual([]);
		expect(description.outputs).toEqual([NodeConnectionTypes.AiLanguageModel]);
		expect(description.credentials).toEqual([{ name: 'sllmApi', required: true }]);
		const model = description.properties.find((p) => p.name === 'model');
		expect(model?.typeOptions?.loadOptionsMethod).toBe('getModels');
		expect(description.usableAsTool).toBeUndefined();
	});
});

describe('supplyData on n8n 2.x (@n8n/ai-node-sdk present)', () => {
	it("hands an OpenAI-compatible config to the SDK's supplyModel", async () => {
		const supplyModel = vi.fn(() => ({ response: { fake: 'model' } }));
		const loadLangchain = vi.fn();
		LmChatSllm.backends = {
			loadAiNodeSdk: async () => ({ supplyModel }) as never,
			loadLangchain,
		};
		const { supplyData } = createContext({
			params,
			credentials: { baseUrl: 'http://gpu-box:8000/v1/', apiKey: 'sk-1' },
		});

		const result = await new LmChatSllm().supplyData.call(supplyData, 0);

		expect(result).toEqual({ response: { fake: 'model' } });
		expect(supplyModel).toHaveBeenCalledWith(supplyData, {
			type: 'openai',
			baseUrl: 'http://gpu-box:8000/v1',
			apiKey: 'sk-1',
			model: 'tiny-llama',
			temperature: 0.1,
			maxTokens: 64,
			topP: 0.9,
			timeout: 5000,
			maxRetries: 0,
		});
		expect(loadLangchain).not.toHaveBeenCalled();
	});
});

describe('supplyData on n8n 1.x (LangChain from the host)', () => {
	function fakeHost() {
		const created: IDataObject[] = [];
		class ChatOpenAI {
			constructor(public fields: IDataObject) {
				created.push(fields);
			}
		}
		class BaseCallbackHandler {}
		const host: LangchainHost = { ChatOpenAI, BaseCallbackHandler, origin: 'fake' };
		return { host, created };
	}

	it('builds ChatOpenAI against the base URL, with a placeholder key when none is set', async () => {
		const { host, created } = fakeHost();
		LmChatSllm.backends = { loadAiNodeSdk: async () => undefined, loadLangchain: () => host };
		const { supplyData } = createContext({
			params: { model: 'tiny-llama', options: { maxTokens: -1 } },
			credentials: { baseUrl: 'http://localhost:8000/v1', apiKey: '' },
		});

		const result = await new LmChatSllm().supplyData.call(supplyData, 0);

		expect(result.response).toBeInstanceOf(host.ChatOpenAI);
		expect(created).toHaveLength(1);
		const { callbacks, ...fields } = created[0];
		expect(fields).toEqual({
			model: 'tiny-llama',
			apiKey: 'EMPTY',
			configuration: { baseURL: 'http://localhost:8000/v1' },
		});
		expect(callbacks).toHaveLength(1);
		expect((callbacks as object[])[0]).toBeInstanceOf(host.BaseCallbackHandler as never);
	});

	it('fails clearly when neither backend exists', async () => {
		const backends: ChatModelBackends = {
			loadAiNodeSdk: async () => undefined,
			loadLangchain: () => undefined,
		};
		const { supplyData } = createContext({ params });
		await expect(
			supplySllmChatModel(supplyData, { baseUrl: 'http://x/v1', model: 'm' }, backends),
		).rejects.toThrow(NodeOperationError);
	});

	it('asks for a model', async () => {
		const { supplyData } = createContext({ params: { model: '', options: {} } });
		await expect(new LmChatSllm().supplyData.call(supplyData, 0)).rejects.toThrow('Choose a model');
	});

	it('records calls as the sub-node input and output', async () => {
		class Base {}
		const { supplyData, addInputData, addOutputData } = createContext({ params });
		addInputData.mockReturnValue({ index: 3 });
		const handler = createTracingHandler(Base, supplyData) as {
			handleLLMStart: (llm: IDataObject, prompts: string[], runId: string) => Promise<void>;
			handleLLMEnd: (output: IDataObject, runId: string) => Promise<void>;
			handleLLMError: (error: Error, runId: string) => Promise<void>;
		};
		await handler.handleLLMStart(
			{ kwargs: { model: 'tiny-llama', temperature: 0, openai_api_key: 'secret' } },
			['Human: hi'],
			'run-1',
		);
		await handler.handleLLMEnd(
			{
				generations: [[{ text: 'hello', generationInfo: { finish_reason: 'stop' }, message: {} }]],
				llmOutput: { tokenUsage: { promptTokens: 2, completionTokens: 1, totalTokens: 3 } },
			},
			'run-1',
		);
		await handler.handleLLMError(new Error('boom'), 'run-1');

		expect(addInputData).toHaveBeenCalledWith(NodeConnectionTypes.AiLanguageModel, [
			[{ json: { messages: ['Human: hi'], options: { model: 'tiny-llama', temperature: 0 } } }],
		]);
		expect(addOutputData).toHaveBeenNthCalledWith(1, NodeConnectionTypes.AiLanguageModel, 3, [
			[
				{
					json: {
						response: {
							generations: [[{ text: 'hello', generationInfo: { finish_reason: 'stop' } }]],
						},
						tokenUsage: { promptTokens: 2, completionTokens: 1, totalTokens: 3 },
					},
				},
			],
		]);
		expect(addOutputData.mock.calls[1][2]).toBeInstanceOf(NodeOperationError);
	});
});

/**
 * The 1.x path end to end at the LangChain level: the real loader finds the `@langchain/openai`
 * installed here (a dev dependency of @n8n/node-cli), and the resulting model talks to a local
 * server that answers like sllm, including a tool call, as the AI Agent needs.
 */
describe('real ChatOpenAI against a local OpenAI-compatible server', () => {
	let server: Server;
	let baseUrl: string;
	const seen: Array<{ url?: string; auth?: string; body: IDataObject }> = [];

	function reply(res: ServerResponse, status: number, body: unknown) {
		res.writeHead(status, { 'content-type': 'application/json' });
		res.end(JSON.stringify(body));
	}

	function handle(req: IncomingMessage, res: ServerResponse, raw: string) {
		const body = (raw ? JSON.parse(raw) : {}) as IDataObject;
		seen.push({ url: req.url, auth: req.headers.authorization, body });
		if (req.url !== '/v1/chat/completions') return reply(res, 404, { error: { message: 'nope' } });
		const base = { id: 'chatcmpl-1', created: 1, model: body.model };
		if (body.stream) {
			res.writeHead(200, { 'content-type': 'text/event-stream' });
			const chunk = (delta: IDataObject, finish: string | null) =>
				`data: ${JSON.stringify({
					...base,
					object: 'chat.completion.chunk',
					choices: [{ index: 0, delta, finish_reason: finish }],
				})}\n\n`;
			res.write(chunk({ role: 'assistant', content: 'Hel' }, null));
			res.write(chunk({ content: 'lo' }, null));
			res.write(chunk({}, 'stop'));
			res.write(
				`data: ${JSON.stringify({
					...base,
					object: 'chat.completion.chunk',
					choices: [],
					usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
				})}\n\n`,
			);
			res.end('data: [DONE]\n\n');
			return undefined;
		}
		const message = Array.isArray(body.tools)
			? {
					role: 'assistant',
					content: null,
					tool_calls: [
						{
							id: 'call_1',
							type: 'function',
							function: { name: 'get_weather', arguments: '{"city":"Seoul"}' },
						},
					],
				}
			: { role: 'assistant', content: 'Hello from sllm' };
		return reply(res, 200, {
			...base,
			object: 'chat.completion',
			choices: [
				{
					index: 0,
					message,
					finish_reason: Array.isArray(body.tools) ? 'tool_calls' : 'stop',
				},
			],
			usage: { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 },
		});
	}

	beforeAll(async () => {
		server = createServer((req, res) => {
			let raw = '';
			req.on('data', (chunk: Buffer) => (raw += chunk.toString('utf8')));
			req.on('end', () => handle(req, res, raw));
		});
		await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
		baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
	});

	afterAll(async () => {
		await new Promise<void>((resolve) => server.close(() => resolve()));
	});

	async function model(apiKey?: string) {
		const context = createContext({ params });
		const backends: ChatModelBackends = {
			loadAiNodeSdk: async () => undefined,
			loadLangchain: defaultBackends.loadLangchain,
		};
		const host = defaultBackends.loadLangchain(testNode);
		expect(host?.origin).toMatch(/@langchain[\\/]openai/);
		const supplied = await supplySllmChatModel(
			context.supplyData,
			{ baseUrl, apiKey, model: 'tiny-llama', temperature: 0, maxRetries: 0 },
			backends,
		);
		return { chat: supplied.response as Record<string, unknown>, context };
	}

	it('answers a plain prompt and traces it', async () => {
		seen.length = 0;
		const { chat, context } = await model('sk-secret');
		const invoke = chat.invoke as (input: string) => Promise<{ content: unknown }>;
		const answer = await invoke.call(chat, 'Say hello');
		expect(answer.content).toBe('Hello from sllm');
		expect(seen[0].auth).toBe('Bearer sk-secret');
		expect(seen[0].body).toMatchObject({
			model: 'tiny-llama',
			temperature: 0,
			messages: [{ role: 'user', content: 'Say hello' }],
		});
		expect(context.addInputData).toHaveBeenCalledTimes(1);
		expect(context.addOutputData).toHaveBeenCalledTimes(1);
	});

	it('binds tools and returns tool calls, as the Tools Agent uses it', async () => {
		seen.length = 0;
		const { chat } = await model();
		expect(typeof chat.bindTools).toBe('function');
		const bound = (chat.bindTools as (tools: unknown[]) => Record<string, unknown>).call(chat, [
			{
				type: 'function',
				function: {
					name: 'get_weather',
					description: 'Weather for a city',
					parameters: {
						type: 'object',
						properties: { city: { type: 'string' } },
						required: ['city'],
					},
				},
			},
		]);
		const invoke = bound.invoke as (input: string) => Promise<{ tool_calls?: IDataObject[] }>;
		const answer = await invoke.call(bound, 'Weather in Seoul?');
		expect(seen[0].auth).toBe('Bearer EMPTY');
		expect((seen[0].body.tools as IDataObject[])[0]).toMatchObject({
			type: 'function',
			function: { name: 'get_weather' },
		});
		expect(answer.tool_calls).toEqual([
			expect.objectContaining({ name: 'get_weather', args: { city: 'Seoul' }, id: 'call_1' }),
		]);
	});

	it('works through the real @n8n/ai-node-sdk supplyModel (the n8n 2.x path)', async () => {
		seen.length = 0;
		const sdk = await defaultBackends.loadAiNodeSdk(testNode);
		expect(typeof sdk?.supplyModel).toBe('function');
		const loadLangchain = vi.fn();
		const context = createContext({ params });
		const supplied = await supplySllmChatModel(
			context.supplyData,
			{ baseUrl, apiKey: 'sk-2x', model: 'tiny-llama', temperature: 0, maxTokens: 32 },
			{ loadAiNodeSdk: defaultBackends.loadAiNodeSdk, loadLangchain },
		);
		expect(loadLangchain).not.toHaveBeenCalled();
		const chat = supplied.response as Record<string, unknown>;
		const bound = (chat.bindTools as (tools: unknown[]) => Record<string, unknown>).call(chat, [
			{
				type: 'function',
				function: { name: 'get_weather', parameters: { type: 'object', properties: {} } },
			},
		]);
		const invoke = bound.invoke as (input: string) => Promise<{ tool_calls?: IDataObject[] }>;
		const answer = await invoke.call(bound, 'Weather in Seoul?');
		expect(answer.tool_calls?.[0]).toMatchObject({ name: 'get_weather', args: { city: 'Seoul' } });
		expect(seen[0]).toMatchObject({ url: '/v1/chat/completions', auth: 'Bearer sk-2x' });
		expect(seen[0].body).toMatchObject({ model: 'tiny-llama', temperature: 0, max_tokens: 32 });
		expect(context.addOutputData).toHaveBeenCalled();
	});

	it('streams over SSE', async () => {
		seen.length = 0;
		const { chat } = await model();
		const stream = (
			chat.stream as (input: string) => Promise<AsyncIterable<{ content: unknown }>>
		).call(chat, 'Say hello');
		let text = '';
		for await (const chunk of await stream) text += String(chunk.content ?? '');
		expect(text).toBe('Hello');
		expect(seen[0].body.stream).toBe(true);
	});
});
