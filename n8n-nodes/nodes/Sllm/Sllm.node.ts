import type {
	IDataObject,
	IExecuteFunctions,
	INode,
	INodeExecutionData,
	INodeType,
	INodeTypeDescription,
} from 'n8n-workflow';
import { NodeApiError, NodeConnectionTypes, NodeOperationError } from 'n8n-workflow';

import { errorItemJson } from '../shared/errors';
import { getModels } from '../shared/transport';
import {
	batchFields,
	batchOperations,
	executeBatchCreate,
	executeBatchGet,
	executeBatchResults,
} from './resources/batch';
import { chatFields, chatOperations, executeChat } from './resources/chat';
import { completionFields, completionOperations, executeCompletion } from './resources/completion';
import {
	executeResponseCreate,
	executeResponseGet,
	responseFields,
	responseOperations,
} from './resources/response';
import { executeTextToSql, textToSqlFields, textToSqlOperations } from './resources/textToSql';

type PerItemOperation = (
	this: IExecuteFunctions,
	itemIndex: number,
) => Promise<IDataObject | IDataObject[]>;

const perItemOperations: Record<string, Record<string, PerItemOperation>> = {
	chat: { complete: executeChat },
	completion: { create: executeCompletion },
	textToSql: { generate: executeTextToSql },
	batch: { get: executeBatchGet, getResults: executeBatchResults },
	response: { create: executeResponseCreate, get: executeResponseGet },
};

/** Keeps n8n errors as they are (adding the item index), wraps anything else. */
function asNodeError(
	node: INode,
	error: unknown,
	itemIndex?: number,
): NodeApiError | NodeOperationError {
	if (error instanceof NodeApiError || error instanceof NodeOperationError) {
		if (itemIndex !== undefined && error.context.itemIndex === undefined) {
			error.context.itemIndex = itemIndex;
		}
		return error;
	}
	return new NodeOperationError(node, error as Error, { itemIndex });
}

export class Sllm implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Sllm',
		name: 'sllm',
		icon: { light: 'file:../../icons/sllm.svg', dark: 'file:../../icons/sllm.dark.svg' },
		group: ['transform'],
		version: [1],
		subtitle: '={{ $parameter["operation"] + ": " + $parameter["resource"] }}',
		description:
			'Chat, completions, text-to-SQL, batches and background responses on an sllm server',
		defaults: {
			name: 'Sllm',
		},
		usableAsTool: true,
		inputs: [NodeConnectionTypes.Main],
		outputs: [NodeConnectionTypes.Main],
		credentials: [
			{
				name: 'sllmApi',
				required: true,
			},
		],
		properties: [
			{
				displayName: 'Resource',
				name: 'resource',
				type: 'options',
				noDataExpression: true,
				options: [
					{
						name: 'Background Response',
						value: 'response',
						description: 'Long-running generation that the server runs as a job',
					},
					{
						name: 'Batch',
						value: 'batch',
						description: 'Many requests at once, processed as a job',
					},
					{
						name: 'Chat',
						value: 'chat',
						description: 'Chat completions',
					},
					{
						name: 'Completion',
						value: 'completion',
						description: 'Raw text completions',
					},
					{
						name: 'Text-to-SQL',
						value: 'textToSql',
						description: 'Questions in plain language answered with SQL',
					},
				],
				default: 'chat',
			},
			chatOperations,
			completionOperations,
			textToSqlOperations,
			batchOperations,
			responseOperations,
			...chatFields,
			...completionFields,
			...textToSqlFields,
			...batchFields,
			...responseFields,
		],
	};

	methods = {
		loadOptions: {
			getModels,
		},
	};

	async execute(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
		const items = this.getInputData();
		const resource = this.getNodeParameter('resource', 0) as string;
		const operation = this.getNodeParameter('operation', 0) as string;
		const returnData: INodeExecutionData[] = [];

		// Batch creation turns all input items into one batch, hence one output item.
		if (resource === 'batch' && operation === 'create') {
			const pairedItem = items.map((_, index) => ({ item: index }));
			try {
				const batch = await executeBatchCreate.call(this);
				returnData.push({ json: batch, pairedItem });
			} catch (error) {
				const nodeError = asNodeError(this.getNode(), error);
				if (!this.continueOnFail()) throw nodeError;
				returnData.push({ json: errorItemJson(nodeError), pairedItem });
			}
			return [returnData];
		}

		const run = perItemOperations[resource]?.[operation];
		if (!run) {
			throw new NodeOperationError(
				this.getNode(),
				`The operation "${operation}" of "${resource}" is not supported`,
			);
		}

		for (let i = 0; i < items.length; i++) {
			try {
				const result = await run.call(this, i);
				for (const json of Array.isArray(result) ? result : [result]) {
					returnData.push({ json, pairedItem: { item: i } });
				}
			} catch (error) {
				const nodeError = asNodeError(this.getNode(), error, i);
				if (!this.continueOnFail()) throw nodeError;
				returnData.push({ json: errorItemJson(nodeError), pairedItem: { item: i } });
			}
		}
		return [returnData];
	}
}
