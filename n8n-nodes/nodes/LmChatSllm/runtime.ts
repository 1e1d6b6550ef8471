/**
 * How the sllm chat model reaches n8n's AI nodes, on both n8n major versions.
 *
 * - n8n 2.x ships `@n8n/ai-node-sdk` and makes it resolvable for community packages (it is a peer
 *   dependency of this package, stripped at install time). `supplyModel` builds the LangChain
 *   `ChatOpenAI` inside n8n, with n8n's tracing and retry handling. This is the supported, n8n
 *   Cloud-compatible path.
 * - n8n 1.x has no such SDK: its chat-model sub-nodes return a LangChain chat model from
 *   `supplyData`. We then build `ChatOpenAI` from the `@langchain/openai` that n8n itself ships
 *   (the copy its own "OpenAI Chat Model" node uses), and add a small tracing callback so the
 *   sub-node shows its input and output in the editor. Nothing LangChain is bundled or installed
 *   by this package.
 *
 * Either way the AI Agent gets a `ChatOpenAI` talking to sllm's /chat/completions, which supports
 * OpenAI tool calling, so `bindTools` and the Tools Agent work.
 */
import type {
	IDataObject,
	INode,
	INodeExecutionData,
	ISupplyDataFunctions,
	SupplyData,
} from 'n8n-workflow';
import { NodeConnectionTypes, NodeOperationError } from 'n8n-workflow';

export interface SllmChatModelSettings {
	baseUrl: string;
	apiKey?: string;
	model: string;
	temperature?: number;
	maxTokens?: number;
	topP?: number;
	timeout?: number;
	maxRetries?: number;
}

/** The part of `@n8n/ai-node-sdk` this package uses. */
export interface AiNodeSdkLike {
	supplyModel: (ctx: never, model: never) => SupplyData;
}

type Constructor<T = object> = new (...args: never[]) => T;

/** LangChain classes found in the running n8n (1.x path). */
export interface LangchainHost {
	ChatOpenAI: new (fields: IDataObject) => object;
	BaseCallbackHandler?: Constructor;
	/** Where `@langchain/openai` was found, for error messages and tests. */
	origin: string;
}

export interface ChatModelBackends {
	loadAiNodeSdk: (node: INode) => Promise<AiNodeSdkLike | undefined>;
	loadLangchain: (node: INode) => LangchainHost | undefined;
}

function isModuleNotFound(error: unknown): boolean {
	const code = (error as { code?: string } | undefined)?.code;
	return code === 'MODULE_NOT_FOUND' || code === 'ERR_MODULE_NOT_FOUND';
}

function parentDir(file: string): string {
	return file.replace(/[\\/][^\\/]*$/, '');
}

async function loadAiNodeSdk(node: INode): Promise<AiNodeSdkLike | undefined> {
	try {
		const sdk = (await import('@n8n/ai-node-sdk')) as unknown as Partial<AiNodeSdkLike>;
		return typeof sdk.supplyModel === 'function' ? (sdk as AiNodeSdkLike) : undefined;
	} catch (error) {
		if (isModuleNotFound(error)) return undefined;
		throw new NodeOperationError(node, error as Error, {
			description: 'Loading @n8n/ai-node-sdk from this n8n failed',
		});
	}
}

/*
 * n8n 1.x only. Community packages may not depend on LangChain (n8n Cloud rejects such
 * packages); we do not: these requires reach the LangChain that n8n 1.x itself ships, through the
 * module paths n8n sets up for community nodes (it adds its own node_modules to NODE_PATH). On
 * n8n 2.x the ai-node-sdk path above is taken and this code never runs.
 */
function loadLangchain(node: INode): LangchainHost | undefined {
	const candidates: Array<() => string> = [
		// The copy n8n's own "OpenAI Chat Model" node uses.
		() => {
			// eslint-disable-next-line @n8n/community-nodes/no-restricted-imports
			const nodesLangchain = require.resolve('@n8n/n8n-nodes-langchain/package.json');
			// eslint-disable-next-line @n8n/community-nodes/no-restricted-imports
			return require.resolve('@langchain/openai', { paths: [parentDir(nodesLangchain)] });
		},
		// Any copy reachable from n8n's module paths.
		// eslint-disable-next-line @n8n/community-nodes/no-restricted-imports
		() => require.resolve('@langchain/openai'),
	];
	for (const resolve of candidates) {
		let openaiPath: string;
		try {
			openaiPath = resolve();
		} catch (error) {
			if (isModuleNotFound(error)) continue;
			throw new NodeOperationError(node, error as Error);
		}
		// eslint-disable-next-line @typescript-eslint/no-require-imports
		const openai = require(openaiPath) as { ChatOpenAI?: LangchainHost['ChatOpenAI'] };
		if (typeof openai.ChatOpenAI !== 'function') continue;
		let BaseCallbackHandler: Constructor | undefined;
		try {
			// eslint-disable-next-line @n8n/community-nodes/no-restricted-imports
			const basePath = require.resolve('@langchain/core/callbacks/base', {
				paths: [parentDir(openaiPath)],
			});
			// eslint-disable-next-line @typescript-eslint/no-require-imports
			BaseCallbackHandler = (require(basePath) as { BaseCallbackHandler?: Constructor })
				.BaseCallbackHandler;
		} catch (error) {
			// Tracing is a nicety: without it the model works, the editor just shows less.
			if (!isModuleNotFound(error)) throw new NodeOperationError(node, error as Error);
		}
		return { ChatOpenAI: openai.ChatOpenAI, BaseCallbackHandler, origin: openaiPath };
	}
	return undefined;
}

export const defaultBackends: ChatModelBackends = { loadAiNodeSdk, loadLangchain };

const TRACED_KWARGS = ['model', 'model_name', 'temperature', 'max_tokens', 'top_p', 'timeout'];

/**
 * A LangChain callback handler (subclassing the host's own `BaseCallbackHandler`) that records
 * each model call as input and output data of this sub-node, as n8n's built-in models do.
 */
export function createTracingHandler(Base: Constructor, ctx: ISupplyDataFunctions): object {
	const connectionType = NodeConnectionTypes.AiLanguageModel;
	class SllmLlmTracing extends (Base as new () => object) {
		name = 'SllmLlmTracing';

		awaitHandlers = true;

		private runs = new Map<string, number>();

		async handleLLMStart(llm: IDataObject, prompts: string[], runId: string): Promise<void> {
			const kwargs = ((llm?.kwargs ?? {}) as IDataObject) || {};
			const options: IDataObject = {};
			for (const key of TRACED_KWARGS) if (kwargs[key] !== undefined) options[key] = kwargs[key];
			const input: INodeExecutionData[][] = [[{ json: { messages: prompts, options } }]];
			const { index } = ctx.addInputData(connectionType, input);
			this.runs.set(runId, index);
		}

		async handleLLMEnd(
			output: {
				generations?: Array<Array<{ text?: string; generationInfo?: IDataObject }>>;
				llmOutput?: IDataObject;
			},
			runId: string,
		): Promise<void> {
			const index = this.runs.get(runId) ?? this.runs.size;
			const generations = (output?.generations ?? []).map((candidates) =>
				candidates.map((g) => ({ text: g.text ?? '', generationInfo: g.generationInfo ?? {} })),
			);
			const json: IDataObject = { response: { generations } };
			const tokenUsage = output?.llmOutput?.tokenUsage;
			if (tokenUsage) json.tokenUsage = tokenUsage;
			ctx.addOutputData(connectionType, index, [[{ json }]]);
		}

		async handleLLMError(error: Error, runId: string): Promise<void> {
			const index = this.runs.get(runId) ?? this.runs.size;
			ctx.addOutputData(
				connectionType,
				index,
				new NodeOperationError(ctx.getNode(), error, { functionality: 'configuration-node' }),
			);
		}
	}
	return new SllmLlmTracing();
}

/** The `supplyData` result for the sllm chat model, via whichever backend this n8n offers. */
export async function supplySllmChatModel(
	ctx: ISupplyDataFunctions,
	settings: SllmChatModelSettings,
	backends: ChatModelBackends = defaultBackends,
): Promise<SupplyData> {
	// The OpenAI clients insist on a key; a server without --api-key ignores it.
	const apiKey = settings.apiKey ? settings.apiKey : 'EMPTY';
	const sampling: IDataObject = {};
	if (settings.temperature !== undefined) sampling.temperature = settings.temperature;
	if (settings.maxTokens !== undefined && settings.maxTokens > 0) {
		sampling.maxTokens = settings.maxTokens;
	}
	if (settings.topP !== undefined) sampling.topP = settings.topP;
	if (settings.timeout !== undefined) sampling.timeout = settings.timeout;
	if (settings.maxRetries !== undefined) sampling.maxRetries = settings.maxRetries;

	const sdk = await backends.loadAiNodeSdk(ctx.getNode());
	if (sdk) {
		const options = {
			type: 'openai',
			baseUrl: settings.baseUrl,
			apiKey,
			model: settings.model,
			...sampling,
		};
		return sdk.supplyModel(ctx as never, options as never);
	}

	const langchain = backends.loadLangchain(ctx.getNode());
	if (!langchain) {
		throw new NodeOperationError(
			ctx.getNode(),
			'This n8n has neither @n8n/ai-node-sdk (n8n 2.x) nor @langchain/openai (n8n 1.x)',
			{
				description:
					'The sllm Chat Model needs n8n 1.x with its AI (LangChain) nodes, or n8n 2.x. See the n8n-nodes-sllm README.',
			},
		);
	}
	const callbacks = langchain.BaseCallbackHandler
		? [createTracingHandler(langchain.BaseCallbackHandler, ctx)]
		: undefined;
	const model = new langchain.ChatOpenAI({
		model: settings.model,
		apiKey,
		...sampling,
		configuration: { baseURL: settings.baseUrl },
		...(callbacks ? { callbacks } : {}),
	});
	return { response: model };
}
