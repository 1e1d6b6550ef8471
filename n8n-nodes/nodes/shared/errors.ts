import type { IDataObject, INode, JsonObject } from 'n8n-workflow';
import { NodeApiError } from 'n8n-workflow';

/**
 * What we could learn about a failed request. The sllm server answers errors the way OpenAI does:
 * `{"error": {"message", "type", "param", "code"}}`. FastAPI's own validation errors
 * (`{"detail": ...}`) are understood too, so a misconfigured proxy or an older server still gives
 * a readable message.
 */
export interface SllmErrorInfo {
	message?: string;
	type?: string;
	param?: string;
	code?: string;
	status?: number;
}

type Loose = Record<string, unknown>;

function asObject(value: unknown): Loose | undefined {
	return value !== null && typeof value === 'object' && !Array.isArray(value)
		? (value as Loose)
		: undefined;
}

function asText(value: unknown): string | undefined {
	if (typeof value === 'string' && value.trim() !== '') return value;
	if (typeof value === 'number') return String(value);
	return undefined;
}

/** A response body may arrive parsed, as a string, or as a Buffer (binary/text encodings). */
function parseBody(body: unknown): Loose | undefined {
	if (body === undefined || body === null) return undefined;
	let value: unknown = body;
	if (Buffer.isBuffer(value)) value = value.toString('utf8');
	if (typeof value === 'string') {
		try {
			value = JSON.parse(value);
		} catch {
			return undefined;
		}
	}
	return asObject(value);
}

function fromBody(body: Loose): SllmErrorInfo | undefined {
	const error = asObject(body.error);
	if (error && asText(error.message)) {
		return {
			message: asText(error.message),
			type: asText(error.type),
			param: asText(error.param),
			code: asText(error.code),
		};
	}
	if (typeof body.error === 'string' && body.error.trim() !== '') {
		return { message: body.error };
	}
	const detail = body.detail;
	if (typeof detail === 'string' && detail.trim() !== '') return { message: detail };
	if (Array.isArray(detail) && detail.length > 0) {
		const parts = detail.map((entry) => {
			const item = asObject(entry);
			if (!item) return String(entry);
			const where = Array.isArray(item.loc) ? item.loc.join('.') : undefined;
			const msg = asText(item.msg) ?? JSON.stringify(item);
			return where ? `${where}: ${msg}` : msg;
		});
		return { message: parts.join('; '), type: 'invalid_request_error' };
	}
	return undefined;
}

function toStatus(value: unknown): number | undefined {
	const n = typeof value === 'string' ? Number.parseInt(value, 10) : value;
	return typeof n === 'number' && Number.isInteger(n) && n >= 100 && n <= 599 ? n : undefined;
}

/**
 * Digs the HTTP status and the server's error object out of whatever the request helper threw:
 * n8n wraps axios errors in a `NodeApiError` (body under `context.data`, the axios error under
 * `cause`), while other helpers and tests may hand over the axios-style error itself.
 */
export function extractErrorInfo(error: unknown): SllmErrorInfo {
	const e = (asObject(error) ?? {}) as Loose;
	const cause = asObject(e.cause) ?? {};
	const response = asObject(e.response) ?? {};
	const causeResponse = asObject(cause.response) ?? {};
	const context = asObject(e.context) ?? {};

	const bodies = [
		context.data,
		causeResponse.data,
		response.data,
		response.body,
		causeResponse.body,
		e.error,
		e.errorResponse,
	];

	let info: SllmErrorInfo = {};
	for (const candidate of bodies) {
		const body = parseBody(candidate);
		const found = body ? fromBody(body) : undefined;
		if (found) {
			info = found;
			break;
		}
	}

	info.status =
		toStatus(e.httpCode) ??
		toStatus(response.status) ??
		toStatus(response.statusCode) ??
		toStatus(causeResponse.status) ??
		toStatus(e.statusCode) ??
		toStatus(cause.status) ??
		toStatus(e.status);

	if (!info.message) {
		// Nothing from the server: keep the transport's own words (e.g. "connect ECONNREFUSED").
		const description = asText(e.description);
		const message = asText(e.message);
		const causeMessage = asText(cause.message);
		info.message = causeMessage ?? message ?? description;
	}
	return info;
}

export function describeErrorInfo(info: SllmErrorInfo): string | undefined {
	const parts: string[] = [];
	if (info.type) parts.push(info.type);
	const extras: string[] = [];
	if (info.param) extras.push(`param: ${info.param}`);
	if (info.code) extras.push(`code: ${info.code}`);
	if (extras.length) parts.push(`(${extras.join(', ')})`);
	if (info.status) parts.push(`[HTTP ${info.status}]`);
	return parts.length ? parts.join(' ') : undefined;
}

/**
 * Turns any request failure into a `NodeApiError` whose message is the server's own message
 * (n8n's default would replace it with a generic text such as "Bad request - please check your
 * parameters").
 */
export function toNodeApiError(node: INode, error: unknown, itemIndex?: number): NodeApiError {
	const info = extractErrorInfo(error);
	const errorResponse: IDataObject = { message: info.message ?? 'Request to sllm failed' };
	if (info.type) errorResponse.type = info.type;
	if (info.param) errorResponse.param = info.param;
	if (info.code) errorResponse.code = info.code;
	if (info.status) errorResponse.httpCode = String(info.status);

	const apiError = new NodeApiError(node, errorResponse as JsonObject, {
		message: info.message ?? 'Request to sllm failed',
		description: describeErrorInfo(info),
		httpCode: info.status ? String(info.status) : undefined,
		itemIndex,
	});
	apiError.context.sllmError = { ...info } as IDataObject;
	return apiError;
}

/** The JSON of an output item for a failed input item when "Continue On Fail" is set. */
export function errorItemJson(error: unknown): IDataObject {
	const e = (asObject(error) ?? {}) as Loose;
	const context = asObject(e.context) ?? {};
	const info = (asObject(context.sllmError) ?? {}) as SllmErrorInfo;
	const json: IDataObject = {
		error: asText(e.message) ?? info.message ?? 'Unknown error',
	};
	const description = asText(e.description);
	if (description) json.description = description;
	if (info.status) json.httpCode = info.status;
	if (info.type) json.type = info.type;
	if (info.param) json.param = info.param;
	if (info.code) json.code = info.code;
	return json;
}
