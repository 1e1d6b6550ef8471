import type {
	IDataObject,
	IExecuteFunctions,
	IHttpRequestMethods,
	IHttpRequestOptions,
	ILoadOptionsFunctions,
	INodePropertyOptions,
	ISupplyDataFunctions,
} from 'n8n-workflow';

import { toNodeApiError } from './errors';

export const CREDENTIAL_NAME = 'sllmApi';
export const DEFAULT_BASE_URL = 'http://localhost:8000/v1';

export type SllmContext = IExecuteFunctions | ILoadOptionsFunctions | ISupplyDataFunctions;

export interface SllmRequest {
	method: IHttpRequestMethods;
	/** Path below the credential's base URL, starting with a slash: `/chat/completions`. */
	path: string;
	body?: IDataObject | Buffer;
	qs?: IDataObject;
	headers?: IDataObject;
	/** `text` returns the body as a string (file downloads such as JSONL). */
	responseType?: 'json' | 'text';
	timeout?: number;
	itemIndex?: number;
}

export function normalizeBaseUrl(value: unknown): string {
	const raw = typeof value === 'string' && value.trim() !== '' ? value.trim() : DEFAULT_BASE_URL;
	return raw.replace(/\/+$/, '');
}

export async function getBaseUrl(this: SllmContext): Promise<string> {
	const credentials = await this.getCredentials(CREDENTIAL_NAME);
	return normalizeBaseUrl(credentials.baseUrl);
}

/**
 * One authenticated request to the sllm server. Failures come back as `NodeApiError` carrying the
 * server's own message (see `toNodeApiError`).
 */
export async function sllmApiRequest(this: SllmContext, request: SllmRequest): Promise<unknown> {
	const baseUrl = await getBaseUrl.call(this);
	const isBuffer = Buffer.isBuffer(request.body);
	const options: IHttpRequestOptions = {
		method: request.method,
		url: `${baseUrl}${request.path}`,
		headers: { Accept: 'application/json', ...(request.headers ?? {}) },
		json: !isBuffer && request.responseType !== 'text',
	};
	if (request.body !== undefined) options.body = request.body;
	if (request.qs !== undefined) options.qs = request.qs;
	if (request.timeout !== undefined) options.timeout = request.timeout;
	if (request.responseType === 'text') {
		options.encoding = 'text';
		options.headers = { ...options.headers, Accept: '*/*' };
	}

	try {
		return (await this.helpers.httpRequestWithAuthentication.call(
			this,
			CREDENTIAL_NAME,
			options,
		)) as unknown;
	} catch (error) {
		throw toNodeApiError(this.getNode(), error, request.itemIndex);
	}
}

/** `GET /models` as dropdown options, shared by the action node and the chat model sub-node. */
export async function getModels(this: ILoadOptionsFunctions): Promise<INodePropertyOptions[]> {
	return (await listModelIds.call(this)).map((id) => ({ name: id, value: id }));
}

/**
 * The served models whose id matches `pattern` (the server lists each model's pooled embeddings
 * as `<name>-embed`), or all of them when none does: any served model can be pooled.
 */
export function getModelsMatching(pattern: RegExp) {
	return async function (this: ILoadOptionsFunctions): Promise<INodePropertyOptions[]> {
		const ids = await listModelIds.call(this);
		const matching = ids.filter((id) => pattern.test(id));
		return (matching.length > 0 ? matching : ids).map((id) => ({ name: id, value: id }));
	};
}

async function listModelIds(this: ILoadOptionsFunctions): Promise<string[]> {
	const response = (await sllmApiRequest.call(this, { method: 'GET', path: '/models' })) as
		| IDataObject
		| undefined;
	const data = Array.isArray(response?.data) ? (response.data as IDataObject[]) : [];
	return data
		.map((model) => String(model.id ?? ''))
		.filter((id) => id !== '')
		.sort((a, b) => a.localeCompare(b));
}
