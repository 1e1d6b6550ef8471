import type { IHttpRequestOptions } from 'n8n-workflow';
import { describe, expect, it } from 'vitest';

import { SllmApi } from '../credentials/SllmApi.credentials';

const credential = new SllmApi();

describe('Sllm API credentials', () => {
	it('defaults to a local server and keeps the API key optional and hidden', () => {
		const baseUrl = credential.properties.find((p) => p.name === 'baseUrl');
		const apiKey = credential.properties.find((p) => p.name === 'apiKey');
		expect(credential.name).toBe('sllmApi');
		expect(baseUrl?.default).toBe('http://localhost:8000/v1');
		expect(apiKey?.typeOptions?.password).toBe(true);
		expect(apiKey?.required).toBeFalsy();
	});

	it('sends the key as a bearer token', async () => {
		const request: IHttpRequestOptions = {
			url: '/models',
			headers: { Accept: 'application/json' },
		};
		const out = await credential.authenticate({ apiKey: ' sk-123 ' }, request);
		expect(out.headers).toEqual({ Accept: 'application/json', Authorization: 'Bearer sk-123' });
	});

	it('sends no Authorization header without a key', async () => {
		const out = await credential.authenticate({ apiKey: '' }, { url: '/models' });
		expect(out.headers?.Authorization).toBeUndefined();
	});

	it('tests the connection with GET /models below the base URL', () => {
		expect(credential.test.request).toMatchObject({ method: 'GET', url: '/models' });
		expect(credential.test.request.baseURL).toContain('$credentials.baseUrl');
	});
});
