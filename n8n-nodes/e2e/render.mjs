#!/usr/bin/env node
// Writes what e2e/run.sh imports into n8n: credentials.json, workflows.json and checks.json.
//
//   node e2e/render.mjs --out DIR --base-url URL --model NAME [--api-key KEY]
//                       [--embed-model NAME] (default: NAME-embed, the id sllm lists for a model's pooled states;
//                       run.sh passes the server's own embedding model when it lists one)
//                       [--workflows chat,chat-model,agent,agent-math,openai-chat,openai-responses,rag,rag-sllm,examples]
//
// Node types of this package are prefixed "CUSTOM." when n8n loads the package through
// N8N_CUSTOM_EXTENSIONS, and "n8n-nodes-sllm." (--prefix) when it is installed as a package, which is
// how the shipped examples name them.
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = dirname(fileURLToPath(import.meta.url));
const { values: args } = parseArgs({
	options: {
		out: { type: 'string' },
		'base-url': { type: 'string' },
		model: { type: 'string' },
		'embed-model': { type: 'string', default: '' },
		'api-key': { type: 'string', default: '' },
		workflows: { type: 'string', default: 'chat,chat-model,agent,openai-chat,openai-responses' },
		prefix: { type: 'string', default: 'CUSTOM' },
	},
});
for (const required of ['out', 'base-url', 'model']) {
	if (!args[required]) throw new Error(`--${required} is required`);
}

const PREFIX = args.prefix;
const SLLM_CRED = { id: 'sllmE2eCred00001', name: 'sllm e2e' };
const OPENAI_CRED = { id: 'openaiE2eCred001', name: 'OpenAI API pointed at sllm (e2e)' };
const baseUrl = args['base-url'].replace(/\/+$/, '');
const model = args.model;
const embedModel = args['embed-model'] || `${model}-embed`;
const PROMPT = 'Reply with exactly one word: pong';
// The issue's agent check: each question needs the calculator, and the answer is the exact number.
const MATH = [
	['1234 * 5678', 7006652], ['987 + 654', 1641], ['1000 - 357', 643], ['144 / 12', 12], ['25 * 25', 625],
	['4096 / 64', 64], ['333 + 444 + 555', 1332], ['12 * 34 - 56', 352], ['99 * 101', 9999], ['7 * 8 * 9', 504],
];

const credentials = [
	{ ...SLLM_CRED, type: 'sllmApi', data: { baseUrl, apiKey: args['api-key'] } },
	{
		...OPENAI_CRED,
		type: 'openAiApi',
		data: { apiKey: args['api-key'] || 'EMPTY', url: baseUrl, header: false },
	},
];

let nodeId = 0;
const node = (name, type, typeVersion, parameters, extra = {}) => ({
	id: `00000000-0000-4000-8000-${String(++nodeId).padStart(12, '0')}`,
	name,
	type,
	typeVersion,
	position: [nodeId * 220, 0],
	parameters,
	...extra,
});
const trigger = () => node('Start', 'n8n-nodes-base.manualTrigger', 1, {});
const main = (to) => ({ main: [[{ node: to, type: 'main', index: 0 }]] });
const ai = (type, to) => ({ [type]: [[{ node: to, type, index: 0 }]] });
const sllmCred = { credentials: { sllmApi: SLLM_CRED } };
const sllmChatModel = () =>
	node('Sllm Chat Model', `${PREFIX}.lmChatSllm`, 1, { model, options: { temperature: 0, maxTokens: 64 } }, sllmCred);
const to = (type, ...targets) => ({ [type]: [targets.map((t) => ({ node: t, type, index: 0 }))] });
const openAiCred = { credentials: { openAiApi: OPENAI_CRED } };

// The RAG check: a few documents go into n8n's in-memory vector store, then a Question and Answer
// chain answers from what a Vector Store Retriever finds. Only one document holds the answer.
const RAG_DOCS = [
	'The Zorblat festival is held every March in the town of Quenby, with lantern boats on the river.',
	'Photosynthesis lets plants turn sunlight, water and carbon dioxide into sugar and oxygen.',
	'The stock market fell sharply on Tuesday after the central bank raised interest rates.',
	'A sourdough starter is a mix of flour and water in which wild yeast and bacteria ferment.',
];
const RAG_QUESTION = 'In which town is the Zorblat festival held?';

/**
 * Documents → Insert (vector store, insert mode) → Question, which feeds Search (the store's Get Many,
 * top 2) and the Question and Answer Chain (chat model + Vector Store Retriever over the same store).
 * `embeddings` feeds all three stores; with `reranker`, Search and the retriever's store rerank.
 */
function ragWorkflow(id, name, memoryKey, embeddings, chatModel, reranker) {
	const store = (label, parameters) =>
		node(label, '@n8n/n8n-nodes-langchain.vectorStoreInMemory', 1.3, {
			memoryKey: { __rl: true, mode: 'list', value: memoryKey },
			...parameters,
		});
	const rerank = reranker ? { useReranker: true } : {};
	const nodes = [
		trigger(),
		node('Documents', 'n8n-nodes-base.code', 2, {
			jsCode: `return ${JSON.stringify(RAG_DOCS)}.map((text) => ({ json: { text } }));`,
		}),
		store('Insert Documents', { mode: 'insert', clearStore: true }),
		node('Default Data Loader', '@n8n/n8n-nodes-langchain.documentDefaultDataLoader', 1.1, {
			jsonMode: 'expressionData',
			jsonData: '={{ $json.text }}',
			textSplittingMode: 'simple',
			options: {},
		}),
		node('Question', 'n8n-nodes-base.code', 2, {
			jsCode: `return [{ json: { question: ${JSON.stringify(RAG_QUESTION)} } }];`,
		}),
		store('Search', { mode: 'load', prompt: '={{ $json.question }}', topK: 2, ...rerank }),
		node('Question and Answer Chain', '@n8n/n8n-nodes-langchain.chainRetrievalQa', 1.6, {
			promptType: 'define',
			text: '={{ $json.question }}',
			options: {},
		}),
		node('Vector Store Retriever', '@n8n/n8n-nodes-langchain.retrieverVectorStore', 1, { topK: 2 }),
		store('Vector Store', { mode: 'retrieve', ...rerank }),
		embeddings,
		chatModel,
	];
	const connections = {
		Start: main('Documents'),
		Documents: main('Insert Documents'),
		'Insert Documents': main('Question'),
		Question: { main: [[{ node: 'Search', type: 'main', index: 0 }, { node: 'Question and Answer Chain', type: 'main', index: 0 }]] },
		'Default Data Loader': ai('ai_document', 'Insert Documents'),
		[embeddings.name]: to('ai_embedding', 'Insert Documents', 'Search', 'Vector Store'),
		[chatModel.name]: ai('ai_languageModel', 'Question and Answer Chain'),
		'Vector Store Retriever': ai('ai_retriever', 'Question and Answer Chain'),
		'Vector Store': ai('ai_vectorStore', 'Vector Store Retriever'),
	};
	if (reranker) {
		nodes.push(reranker);
		connections[reranker.name] = to('ai_reranker', 'Search', 'Vector Store');
	}
	// Laid out for reading in the editor: sub-nodes below the nodes they serve.
	const at = {
		Start: [0, 0], Documents: [200, 0], 'Insert Documents': [420, 0], Question: [760, 0],
		'Default Data Loader': [560, 240], Search: [1040, -260], 'Question and Answer Chain': [1040, 120],
		'Vector Store Retriever': [1180, 340], 'Vector Store': [1180, 560],
		[embeddings.name]: [760, 720], [chatModel.name]: [980, 340],
		...(reranker ? { [reranker.name]: [1400, 720] } : {}),
	};
	for (const n of nodes) n.position = at[n.name] ?? n.position;
	return {
		workflow: workflow(id, name, nodes, connections),
		// The answer path must work end to end; whether a small model answers well is not asserted
		// (E2E_EXPECT still applies). Search must return documents with their scores.
		check: { node: 'Question and Answer Chain', field: 'response', also: [
			{ node: 'Search', field: 'score', minItems: 1 },
			{ node: 'Search', field: 'document', minItems: 1 },
		] },
	};
}

const workflow = (id, name, nodes, connections) => ({
	id,
	name,
	active: false,
	nodes,
	connections,
	settings: { executionOrder: 'v1' },
	pinData: {},
});

/** Each entry: the workflow and what its output must contain. */
const builders = {
	chat: () => ({
		workflow: workflow('sllmE2eChat00001', 'e2e: Sllm node, chat', [
			trigger(),
			node('Sllm Chat', `${PREFIX}.sllm`, 1, {
				resource: 'chat',
				operation: 'complete',
				model,
				inputType: 'prompt',
				prompt: PROMPT,
				simplify: true,
				options: { temperature: 0, maxTokens: 16 },
			}, sllmCred),
		], { Start: main('Sllm Chat') }),
		check: { node: 'Sllm Chat', field: 'content' },
	}),
	'chat-model': () => ({
		workflow: workflow('sllmE2eModel0001', 'e2e: Sllm Chat Model in a Basic LLM Chain', [
			trigger(),
			node('Basic LLM Chain', '@n8n/n8n-nodes-langchain.chainLlm', 1.7, { promptType: 'define', text: PROMPT }),
			sllmChatModel(),
		], {
			Start: main('Basic LLM Chain'),
			'Sllm Chat Model': ai('ai_languageModel', 'Basic LLM Chain'),
		}),
		check: { node: 'Basic LLM Chain', field: 'text' },
	}),
	agent: () => ({
		workflow: workflow('sllmE2eAgent0001', 'e2e: AI Agent with the Sllm Chat Model and a tool', [
			trigger(),
			node('AI Agent', '@n8n/n8n-nodes-langchain.agent', 2.2, {
				promptType: 'define',
				text: 'What is 2 + 2? Use the calculator tool, then answer with the number.',
				options: { maxIterations: 4 },
			}),
			sllmChatModel(),
			node('Calculator', '@n8n/n8n-nodes-langchain.toolCalculator', 1, {}),
		], {
			Start: main('AI Agent'),
			'Sllm Chat Model': ai('ai_languageModel', 'AI Agent'),
			Calculator: ai('ai_tool', 'AI Agent'),
		}),
		check: { node: 'AI Agent', field: 'output' },
	}),
	// n8n's AI Agent (version 3: 2.x refuses a Responses API model) with n8n's own OpenAI Chat Model
	// node (its default, the Responses API) and the Calculator tool, over ten questions; the check counts the answers holding the right number.
	'agent-math': () => ({
		workflow: workflow('sllmE2eAgentMath', "e2e: AI Agent, n8n's OpenAI Chat Model and the Calculator", [
			trigger(),
			node('Questions', 'n8n-nodes-base.code', 2, {
				jsCode: `return ${JSON.stringify(MATH.map(([q, answer]) => ({ question: `Use the calculator to compute ${q}.`, answer })))}.map((json) => ({ json }));`,
			}),
			node('AI Agent', '@n8n/n8n-nodes-langchain.agent', 3, {
				promptType: 'define',
				text: '={{ $json.question }}',
				options: { maxIterations: 4 },
			}, { onError: 'continueRegularOutput' }), // a question the agent gives up on counts as wrong
			node('OpenAI Chat Model', '@n8n/n8n-nodes-langchain.lmChatOpenAi', 1.3, {
				model: { __rl: true, mode: 'id', value: model },
				options: { temperature: 0, maxTokens: 128 },
			}, { credentials: { openAiApi: OPENAI_CRED } }),
			node('Calculator', '@n8n/n8n-nodes-langchain.toolCalculator', 1, {}),
		], {
			Start: main('Questions'),
			Questions: main('AI Agent'),
			'OpenAI Chat Model': ai('ai_languageModel', 'AI Agent'),
			Calculator: ai('ai_tool', 'AI Agent'),
		}),
		check: { node: 'AI Agent', field: 'output', minItems: MATH.length, answers: MATH.map(([, a]) => a) },
	}),
	'openai-chat': () => ({
		workflow: workflow('sllmE2eOpenAi001', "e2e: n8n's OpenAI Chat Model (Chat Completions) on sllm", [
			trigger(),
			node('Basic LLM Chain', '@n8n/n8n-nodes-langchain.chainLlm', 1.7, { promptType: 'define', text: PROMPT }),
			node('OpenAI Chat Model', '@n8n/n8n-nodes-langchain.lmChatOpenAi', 1.3, {
				model: { __rl: true, mode: 'id', value: model },
				responsesApiEnabled: false,
				options: { temperature: 0, maxTokens: 16 },
			}, { credentials: { openAiApi: OPENAI_CRED } }),
		], {
			Start: main('Basic LLM Chain'),
			'OpenAI Chat Model': ai('ai_languageModel', 'Basic LLM Chain'),
		}),
		check: { node: 'Basic LLM Chain', field: 'text' },
	}),
	'openai-responses': () => ({
		workflow: workflow('sllmE2eOpenAi002', "e2e: n8n's OpenAI Chat Model (Responses API) on sllm", [
			trigger(),
			node('Basic LLM Chain', '@n8n/n8n-nodes-langchain.chainLlm', 1.7, { promptType: 'define', text: PROMPT }),
			node('OpenAI Chat Model', '@n8n/n8n-nodes-langchain.lmChatOpenAi', 1.3, {
				model: { __rl: true, mode: 'id', value: model },
				responsesApiEnabled: true,
				options: {},
			}, { credentials: { openAiApi: OPENAI_CRED } }),
		], {
			Start: main('Basic LLM Chain'),
			'OpenAI Chat Model': ai('ai_languageModel', 'Basic LLM Chain'),
		}),
		check: { node: 'Basic LLM Chain', field: 'text' },
	}),
	// n8n's own nodes pointed at sllm: Embeddings OpenAI, the Simple (in-memory) Vector Store, the
	// Question and Answer Chain with n8n's OpenAI Chat Model (Chat Completions).
	rag: () =>
		ragWorkflow(
			'sllmE2eRagOpenAi',
			"e2e: RAG with n8n's Embeddings OpenAI, in-memory vector store and Q&A chain on sllm",
			'sllm-e2e-rag-openai',
			node('Embeddings OpenAI', '@n8n/n8n-nodes-langchain.embeddingsOpenAi', 1.2, { model: embedModel, options: {} }, openAiCred),
			node('OpenAI Chat Model', '@n8n/n8n-nodes-langchain.lmChatOpenAi', 1.3, {
				model: { __rl: true, mode: 'id', value: model },
				responsesApiEnabled: false,
				options: { temperature: 0, maxTokens: 64 },
			}, openAiCred),
		),
	// The same with this package's sub-nodes: Sllm Embeddings, Sllm Reranker (top 1) and the Sllm Chat Model.
	'rag-sllm': () =>
		ragWorkflow(
			'sllmE2eRagSllm01',
			'e2e: RAG with the Sllm Embeddings, Sllm Reranker and Sllm Chat Model',
			'sllm-e2e-rag-sllm',
			node('Sllm Embeddings', `${PREFIX}.embeddingsSllm`, 1, { model: embedModel, options: {} }, sllmCred),
			sllmChatModel(),
			node('Sllm Reranker', `${PREFIX}.rerankerSllm`, 1, { model: embedModel, topN: 1, options: {} }, sllmCred),
		),
	examples: () => examples(),
};

/**
 * The shipped examples, made runnable by `n8n execute`: their package prefix becomes CUSTOM., their
 * credentials and model become the e2e ones, and a trigger that `n8n execute` cannot start is
 * replaced by a Manual Trigger (a chat trigger by a Manual Trigger and a Set node of the same
 * name, so the agent still receives chatInput and sessionId).
 */
function examples() {
	const dir = join(here, '..', 'examples');
	const checks = {
		'chat-with-ai-agent.json': { node: 'AI Agent', field: 'output' },
		'daily-text-to-sql-report.json': { node: 'Format report', field: 'markdown' },
		'batch-over-spreadsheet-rows.json': { node: 'Sentiment per row', field: 'sentiment', minItems: 3 },
	};
	return readdirSync(dir)
		.filter((f) => f.endsWith('.json'))
		.sort()
		.map((file, index) => {
			const wf = JSON.parse(
				readFileSync(join(dir, file), 'utf8').replaceAll('"n8n-nodes-sllm.', `"${PREFIX}.`),
			);
			const nodes = [];
			const connections = { ...wf.connections };
			for (const n of wf.nodes) {
				if (n.credentials?.sllmApi) n.credentials.sllmApi = SLLM_CRED;
				if (typeof n.parameters?.model === 'string') n.parameters.model = model;
				if (n.type === 'n8n-nodes-base.scheduleTrigger') {
					nodes.push({ ...n, type: 'n8n-nodes-base.manualTrigger', typeVersion: 1, parameters: {} });
				} else if (n.type === '@n8n/n8n-nodes-langchain.chatTrigger') {
					const start = { ...trigger(), name: 'Start (e2e)' };
					nodes.push(start);
					connections[start.name] = main(n.name);
					nodes.push({
						id: n.id,
						name: n.name,
						type: 'n8n-nodes-base.set',
						typeVersion: 3.4,
						position: n.position,
						parameters: {
							assignments: {
								assignments: [
									{ id: 'c1', name: 'chatInput', value: 'What is 2 + 2?', type: 'string' },
									{ id: 'c2', name: 'sessionId', value: 'e2e-session', type: 'string' },
								],
							},
							options: {},
						},
					});
				} else {
					nodes.push(n);
				}
			}
			return {
				workflow: { ...wf, id: `sllmE2eExample0${index + 1}`, name: `e2e example: ${wf.name}`, active: false, nodes, connections },
				check: checks[file] ?? { node: nodes[nodes.length - 1].name, field: null },
			};
		});
}

const selected = args.workflows.split(',').map((s) => s.trim()).filter(Boolean);
const entries = selected.flatMap((name) => {
	const build = builders[name];
	if (!build) throw new Error(`Unknown workflow "${name}"; known: ${Object.keys(builders).join(', ')}`);
	const built = build();
	return (Array.isArray(built) ? built : [built]).map((entry) => ({ ...entry, key: name }));
});

mkdirSync(args.out, { recursive: true });
writeFileSync(join(args.out, 'credentials.json'), JSON.stringify(credentials, null, 2));
writeFileSync(join(args.out, 'workflows.json'), JSON.stringify(entries.map((e) => e.workflow), null, 2));
writeFileSync(
	join(args.out, 'checks.json'),
	JSON.stringify(entries.map((e) => ({ key: e.key, id: e.workflow.id, name: e.workflow.name, ...e.check })), null, 2),
);
console.log(entries.map((e) => `${e.workflow.id}\t${e.workflow.name}`).join('\n'));
