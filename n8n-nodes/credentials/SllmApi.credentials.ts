import type {
	ICredentialDataDecryptedObject,
	ICredentialTestRequest,
	ICredentialType,
	IHttpRequestOptions,
	INodeProperties,
	Icon,
} from 'n8n-workflow';

/**
 * Connection to an sllm server (or any OpenAI-compatible server).
 *
 * `baseUrl` includes the API prefix (`/v1`), exactly as the `openai` SDKs expect it.
 * The API key is optional: a server started without `--api-key` accepts any request.
 */
export class SllmApi implements ICredentialType {
	name = 'sllmApi';

	displayName = 'Sllm API';

	documentationUrl = 'https://github.com/sllm/sllm/tree/main/n8n-nodes#credentials';

	icon: Icon = { light: 'file:../icons/sllm.svg', dark: 'file:../icons/sllm.dark.svg' };

	properties: INodeProperties[] = [
		{
			displayName: 'Base URL',
			name: 'baseUrl',
			type: 'string',
			default: 'http://localhost:8000/v1',
			placeholder: 'http://localhost:8000/v1',
			description: 'URL of the sllm server including the API prefix, e.g. http://localhost:8000/v1',
			required: true,
		},
		{
			displayName: 'API Key',
			name: 'apiKey',
			type: 'string',
			typeOptions: { password: true },
			default: '',
			description:
				'Key given to the server with --api-key. Leave empty for a server that runs without authentication.',
		},
	];

	async authenticate(
		credentials: ICredentialDataDecryptedObject,
		requestOptions: IHttpRequestOptions,
	): Promise<IHttpRequestOptions> {
		const apiKey = typeof credentials.apiKey === 'string' ? credentials.apiKey.trim() : '';
		if (apiKey) {
			requestOptions.headers = {
				...(requestOptions.headers ?? {}),
				Authorization: `Bearer ${apiKey}`,
			};
		}
		return requestOptions;
	}

	test: ICredentialTestRequest = {
		request: {
			baseURL: '={{ String($credentials.baseUrl).replace(/\\/+$/, "") }}',
			url: '/models',
			method: 'GET',
		},
	};
}
