import type {
	IDataObject,
	IExecuteFunctions,
	IHttpRequestOptions,
	ILoadOptionsFunctions,
	INode,
	INodeExecutionData,
	ISupplyDataFunctions,
} from 'n8n-workflow';
import { NodeApiError } from 'n8n-workflow';
import { vi } from 'vitest';

export const BASE_URL = 'http://sllm.test/v1';

export const testNode: INode = {
	id: '5b8c1f4e-0000-4000-8000-000000000001',
	name: 'Sllm',
	type: 'n8n-nodes-sllm.sllm',
	typeVersion: 1,
	position: [0, 0],
	parameters: {},
};

/** A parameter value, or a function of the item index for per-item expressions. */
export type ParamValue = unknown | ((itemIndex: number) => unknown);

export type HttpHandler = (options: IHttpRequestOptions) => unknown;

export interface FakeContextOptions {
	params: Record<string, ParamValue>;
	items?: INodeExecutionData[];
	credentials?: IDataObject;
	http?: HttpHandler;
	continueOnFail?: boolean;
}

function readParam(
	params: Record<string, ParamValue>,
	name: string,
	itemIndex: number,
	fallback?: unknown,
) {
	if (!(name in params)) return fallback;
	const value = params[name];
	return typeof value === 'function' ? (value as (i: number) => unknown)(itemIndex) : value;
}

/**
 * The slice of n8n's execute-functions context the nodes use, with HTTP mocked at the boundary:
 * `helpers.httpRequestWithAuthentication` records each request and answers from `http`.
 */
export function createContext(options: FakeContextOptions) {
	const requests: IHttpRequestOptions[] = [];
	const credentialTypes: string[] = [];
	const http = options.http ?? (() => ({}));
	const httpRequestWithAuthentication = vi.fn(
		async (credentialType: string, request: IHttpRequestOptions) => {
			credentialTypes.push(credentialType);
			requests.push(request);
			return await http(request);
		},
	);
	const addInputData = vi.fn(() => ({ index: 0 }));
	const addOutputData = vi.fn();
	const ctx = {
		getInputData: () => options.items ?? [{ json: {} }],
		getNodeParameter: (name: string, itemIndex: number, fallback?: unknown) =>
			readParam(options.params, name, itemIndex, fallback),
		getNode: () => testNode,
		getCredentials: async () =>
			options.credentials ?? { baseUrl: `${BASE_URL}/`, apiKey: 'sk-test' },
		continueOnFail: () => options.continueOnFail ?? false,
		addInputData,
		addOutputData,
		getNextRunIndex: () => 0,
		logAiEvent: vi.fn(),
		setMetadata: vi.fn(),
		helpers: { httpRequestWithAuthentication },
	};
	return {
		ctx,
		execute: ctx as unknown as IExecuteFunctions,
		loadOptions: ctx as unknown as ILoadOptionsFunctions,
		supplyData: ctx as unknown as ISupplyDataFunctions,
		requests,
		credentialTypes,
		httpRequestWithAuthentication,
		addInputData,
		addOutputData,
	};
}

/** What axios throws for an HTTP error status. */
export class FakeAxiosError extends Error {
	isAxiosError = true;

	response?: { status: number; data: unknown; headers: IDataObject };

	constructor(status?: number, data?: unknown, message?: string) {
		super(message ?? `Request failed with status code ${status}`);
		this.name = 'AxiosError';
		if (status !== undefined) this.response = { status, data, headers: {} };
	}
}
Object.defineProperty(FakeAxiosError, 'name', { value: 'AxiosError' });

/** What n8n's `httpRequestWithAuthentication` throws: the axios error wrapped in `NodeApiError`. */
export function n8nHttpError(status: number, body: unknown): NodeApiError {
	return new NodeApiError(testNode, new FakeAxiosError(status, body) as never);
}

export function openAiError(message: string, type: string, param?: string, code?: string) {
	return { error: { message, type, param: param ?? null, code: code ?? null } };
}

/** Routes requests by "METHOD path" (path below the base URL); unknown routes fail the test. */
export function routes(table: Record<string, (options: IHttpRequestOptions) => unknown>) {
	return (options: IHttpRequestOptions) => {
		const path = String(options.url).replace(BASE_URL, '');
		const key = `${options.method ?? 'GET'} ${path}`;
		const handler = table[key];
		if (!handler) throw new Error(`Unexpected request: ${key}`);
		return handler(options);
	};
}
