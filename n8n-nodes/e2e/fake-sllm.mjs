#!/usr/bin/env node
// A stand-in for the sllm server, for dry runs of e2e/run.sh when no real server is at hand.
// It speaks just enough of the OpenAI wire format (and sllm's /text2sql) for the workflows in
// e2e/: /models, /chat/completions (plain, SSE, one scripted tool call), /completions,
// /responses (foreground and background), /text2sql, /files, /batches, /embeddings (word-hash
// vectors, float or base64) and /rerank (shared words).
// It proves that n8n loads and drives the nodes; it proves nothing about the real server.
//
//   node e2e/fake-sllm.mjs [port]      prints "listening <base url>" once ready
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';

const port = Number(process.argv[2] ?? process.env.FAKE_SLLM_PORT ?? 0);
const apiKey = process.env.FAKE_SLLM_API_KEY ?? '';
const MODEL = process.env.FAKE_SLLM_MODEL ?? 'fake-model';
const EMBED_MODEL = `${MODEL}-embed`;
const files = new Map();
const batches = new Map();
const responses = new Map();
const now = () => Math.floor(Date.now() / 1000);

function send(res, status, body, headers = {}) {
	res.writeHead(status, { 'content-type': 'application/json', ...headers });
	res.end(typeof body === 'string' ? body : JSON.stringify(body));
}

function error(res, status, message, type, param = null, code = null) {
	send(res, status, { error: { message, type, param, code } });
}

function lastUserText(messages) {
	const last = [...(messages ?? [])].reverse().find((m) => m.role === 'user');
	if (!last) return '';
	if (typeof last.content === 'string') return last.content;
	return (last.content ?? []).map((p) => p.text ?? '').join('');
}

function reply(text) {
	if (/ping|pong/i.test(text)) return 'pong';
	if (/sentiment/i.test(text)) return 'positive';
	return `You said: ${text}`;
}

const words = (text) => String(text).toLowerCase().split(/[^a-z0-9]+/).filter(Boolean);

/** 32 buckets of hashed words, L2-normalised: texts sharing words are near. */
function embed(text) {
	const v = new Array(32).fill(0);
	for (const w of words(text)) {
		let h = 0;
		for (const c of w) h = (h * 31 + c.charCodeAt(0)) >>> 0;
		v[h % 32] += 1;
	}
	const norm = Math.hypot(...v) || 1;
	return v.map((x) => x / norm);
}

/** A retrieval QA prompt puts the documents in the system message after "Context:"; answer from them. */
function contextAnswer(messages) {
	const system = (messages ?? []).find((m) => m.role === 'system');
	const text = typeof system?.content === 'string' ? system.content : '';
	const at = text.indexOf('Context:');
	return at < 0 ? undefined : `From the context: ${text.slice(at + 8).trim().replace(/\s+/g, ' ').slice(0, 200)}`;
}

function chatCompletion(body) {
	const messages = body.messages ?? [];
	const usage = { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 };
	const base = { id: `chatcmpl-${randomUUID()}`, object: 'chat.completion', created: now(), model: body.model };
	const toolResult = [...messages].reverse().find((m) => m.role === 'tool');
	if (Array.isArray(body.tools) && body.tools.length > 0 && !toolResult) {
		const tool = body.tools[0].function;
		const properties = tool.parameters?.properties ?? {};
		const args = 'input' in properties ? { input: '2 + 2' } : {};
		return {
			...base,
			choices: [
				{
					index: 0,
					message: {
						role: 'assistant',
						content: null,
						tool_calls: [
							{ id: 'call_1', type: 'function', function: { name: tool.name, arguments: JSON.stringify(args) } },
						],
					},
					finish_reason: 'tool_calls',
				},
			],
			usage,
		};
	}
	const content = toolResult
		? `The tool said ${typeof toolResult.content === 'string' ? toolResult.content : JSON.stringify(toolResult.content)}`
		: body.response_format?.type === 'json_object'
			? JSON.stringify({ answer: reply(lastUserText(messages)) })
			: (contextAnswer(messages) ?? reply(lastUserText(messages)));
	return {
		...base,
		choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
		usage,
	};
}

function streamChat(res, completion, includeUsage) {
	res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
	const { choices, usage, ...base } = completion;
	const chunk = (choice) => `data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices: [choice] })}\n\n`;
	const message = choices[0].message;
	if (message.tool_calls) {
		res.write(chunk({ index: 0, delta: { role: 'assistant', tool_calls: message.tool_calls.map((c, index) => ({ index, ...c })) }, finish_reason: null }));
	} else {
		res.write(chunk({ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }));
		res.write(chunk({ index: 0, delta: { content: message.content }, finish_reason: null }));
	}
	res.write(chunk({ index: 0, delta: {}, finish_reason: choices[0].finish_reason }));
	if (includeUsage) res.write(`data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices: [], usage })}\n\n`);
	res.end('data: [DONE]\n\n');
}

function responseObject(body, status = 'completed') {
	const input = typeof body.input === 'string' ? body.input : lastUserText((body.input ?? []).map((m) => ({ role: m.role, content: m.content })));
	const text = reply(input);
	return {
		id: `resp_${randomUUID().replace(/-/g, '')}`,
		object: 'response',
		created_at: now(),
		status,
		background: Boolean(body.background),
		model: body.model,
		output:
			status === 'completed'
				? [{ id: `msg_${randomUUID()}`, type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text, annotations: [] }] }]
				: [],
		usage: { input_tokens: 5, output_tokens: 1, total_tokens: 6 },
	};
}

function parseMultipart(buffer, contentType) {
	const boundary = /boundary=(?:"([^"]+)"|([^;]+))/.exec(contentType ?? '');
	if (!boundary) return {};
	const delimiter = `--${boundary[1] ?? boundary[2]}`;
	const fields = {};
	for (const part of buffer.toString('utf8').split(delimiter).slice(1, -1)) {
		const [head, ...rest] = part.replace(/^\r\n/, '').split('\r\n\r\n');
		const name = /name="([^"]+)"/.exec(head)?.[1];
		const filename = /filename="([^"]+)"/.exec(head)?.[1];
		const content = rest.join('\r\n\r\n').replace(/\r\n$/, '');
		if (name) fields[name] = filename ? { filename, content } : content;
	}
	return fields;
}

function runBatch(batch) {
	const input = files.get(batch.input_file_id).content;
	const lines = input.split('\n').filter((l) => l.trim());
	const out = lines.map((raw) => {
		const line = JSON.parse(raw);
		const body =
			line.url === '/v1/completions'
				? { id: `cmpl-${randomUUID()}`, object: 'text_completion', model: line.body.model, choices: [{ index: 0, text: ` ${reply(line.body.prompt)}`, finish_reason: 'stop' }], usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } }
				: chatCompletion(line.body);
		return JSON.stringify({ id: `batch_req_${randomUUID()}`, custom_id: line.custom_id, response: { status_code: 200, request_id: randomUUID(), body }, error: null });
	});
	const outputId = `file-${randomUUID()}`;
	files.set(outputId, { id: outputId, object: 'file', purpose: 'batch_output', filename: 'output.jsonl', content: out.join('\n') + '\n' });
	Object.assign(batch, {
		status: 'completed',
		output_file_id: outputId,
		completed_at: now(),
		request_counts: { total: lines.length, completed: lines.length, failed: 0 },
	});
}

async function handle(req, res) {
	const chunks = [];
	for await (const chunk of req) chunks.push(chunk);
	const raw = Buffer.concat(chunks);
	const url = new URL(req.url, 'http://fake');
	const path = url.pathname.replace(/^\/v1/, '');
	const method = req.method;
	if (apiKey && req.headers.authorization !== `Bearer ${apiKey}`) {
		return error(res, 401, 'Invalid API key', 'authentication_error', null, 'invalid_api_key');
	}
	let body = {};
	if (raw.length && (req.headers['content-type'] ?? '').includes('json')) {
		try {
			body = JSON.parse(raw.toString('utf8'));
		} catch {
			return error(res, 400, 'Body is not valid JSON', 'invalid_request_error');
		}
	}
	if (body.model !== undefined && body.model !== MODEL && body.model !== EMBED_MODEL) {
		return error(res, 404, `The model \`${body.model}\` does not exist.`, 'invalid_request_error', 'model', 'model_not_found');
	}

	if (method === 'GET' && path === '/models') {
		const data = [MODEL, EMBED_MODEL].map((id) => ({ id, object: 'model', created: now(), owned_by: 'sllm' }));
		return send(res, 200, { object: 'list', data });
	}
	if (method === 'POST' && path === '/embeddings') {
		const input = typeof body.input === 'string' ? [body.input] : body.input;
		if (!Array.isArray(input) || input.some((t) => typeof t !== 'string')) {
			return error(res, 400, 'This fake embeds strings only', 'invalid_request_error', 'input');
		}
		const data = input.map((text, index) => {
			const vector = embed(text);
			const embedding = body.encoding_format === 'base64' ? Buffer.from(new Float32Array(vector).buffer).toString('base64') : vector;
			return { object: 'embedding', index, embedding };
		});
		return send(res, 200, { object: 'list', model: body.model, data, usage: { prompt_tokens: input.length, total_tokens: input.length } });
	}
	if (method === 'POST' && path === '/rerank') {
		const query = new Set(words(body.query));
		const results = (body.documents ?? [])
			.map((doc, index) => ({ index, relevance_score: words(typeof doc === 'string' ? doc : doc.text).filter((w) => query.has(w)).length / query.size }))
			.sort((a, b) => b.relevance_score - a.relevance_score)
			.slice(0, body.top_n ?? undefined);
		return send(res, 200, { id: `rerank-${randomUUID()}`, model: body.model, results, usage: { total_tokens: 1 } });
	}
	if (method === 'POST' && path === '/chat/completions') {
		const completion = chatCompletion(body);
		if (body.stream) return streamChat(res, completion, body.stream_options?.include_usage);
		return send(res, 200, completion);
	}
	if (method === 'POST' && path === '/completions') {
		return send(res, 200, { id: `cmpl-${randomUUID()}`, object: 'text_completion', created: now(), model: body.model, choices: [{ index: 0, text: ` ${reply(String(body.prompt))}`, finish_reason: 'stop', logprobs: null }], usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } });
	}
	if (method === 'POST' && path === '/responses') {
		if (body.stream) return error(res, 400, 'This fake does not stream responses', 'invalid_request_error', 'stream');
		const response = responseObject(body, body.background ? 'queued' : 'completed');
		responses.set(response.id, { body, response });
		return send(res, 200, response);
	}
	const responseMatch = /^\/responses\/([^/]+)$/.exec(path);
	if (method === 'GET' && responseMatch) {
		const entry = responses.get(responseMatch[1]);
		if (!entry) return error(res, 404, `No response with id ${responseMatch[1]}`, 'invalid_request_error', 'response_id');
		const done = { ...responseObject(entry.body), id: entry.response.id };
		return send(res, 200, done);
	}
	if (method === 'POST' && path === '/text2sql') {
		if (!body.source || !body.question) return error(res, 400, 'source and question are required', 'invalid_request_error', body.source ? 'question' : 'source');
		const result = { sql: 'SELECT region, SUM(amount) AS total FROM sales GROUP BY region ORDER BY total DESC', source: body.source, question: body.question };
		if (body.execute === false) return send(res, 200, result);
		const rows = [['north', 120], ['south', 80], ['east', 42]].slice(0, body.max_rows ?? 100);
		return send(res, 200, { ...result, columns: ['region', 'total'], rows, row_count: rows.length });
	}
	if (method === 'POST' && path === '/files') {
		const form = parseMultipart(raw, req.headers['content-type']);
		if (!form.file?.content) return error(res, 400, 'A file is required', 'invalid_request_error', 'file');
		const id = `file-${randomUUID()}`;
		const file = { id, object: 'file', bytes: Buffer.byteLength(form.file.content), created_at: now(), filename: form.file.filename, purpose: form.purpose };
		files.set(id, { ...file, content: form.file.content });
		return send(res, 200, file);
	}
	const fileMatch = /^\/files\/([^/]+)\/content$/.exec(path);
	if (method === 'GET' && fileMatch) {
		const file = files.get(fileMatch[1]);
		if (!file) return error(res, 404, `No such file: ${fileMatch[1]}`, 'invalid_request_error', 'file_id');
		res.writeHead(200, { 'content-type': 'application/octet-stream' });
		return res.end(file.content);
	}
	if (method === 'POST' && path === '/batches') {
		if (!files.has(body.input_file_id)) return error(res, 404, `No such file: ${body.input_file_id}`, 'invalid_request_error', 'input_file_id');
		const batch = { id: `batch_${randomUUID().replace(/-/g, '')}`, object: 'batch', endpoint: body.endpoint, input_file_id: body.input_file_id, completion_window: body.completion_window, status: 'validating', created_at: now(), metadata: body.metadata ?? null, output_file_id: null, error_file_id: null };
		batches.set(batch.id, batch);
		setTimeout(() => runBatch(batch), 200);
		return send(res, 200, batch);
	}
	const batchMatch = /^\/batches\/([^/]+)$/.exec(path);
	if (method === 'GET' && batchMatch) {
		const batch = batches.get(batchMatch[1]);
		if (!batch) return error(res, 404, `No batch with id ${batchMatch[1]}`, 'invalid_request_error', 'batch_id');
		return send(res, 200, batch);
	}
	return error(res, 404, `Unknown route ${method} ${url.pathname}`, 'invalid_request_error');
}

const server = createServer((req, res) => {
	handle(req, res).catch((e) => error(res, 500, String(e?.message ?? e), 'server_error'));
});
server.listen(port, '127.0.0.1', () => {
	console.log(`listening http://127.0.0.1:${server.address().port}/v1`);
});
