import type { IDataObject, IExecuteFunctions, INodeProperties } from 'n8n-workflow';
import { NodeOperationError } from 'n8n-workflow';

import { sllmApiRequest } from '../../shared/transport';

const show = { resource: ['textToSql'], operation: ['generate'] };

export const textToSqlOperations: INodeProperties = {
	displayName: 'Operation',
	name: 'operation',
	type: 'options',
	noDataExpression: true,
	displayOptions: { show: { resource: ['textToSql'] } },
	options: [
		{
			name: 'Ask a Question',
			value: 'generate',
			action: 'Ask a question in plain language',
			description:
				'Turn a question into SQL for a registered data source (POST /text2sql), optionally running it',
		},
	],
	default: 'generate',
};

export const textToSqlFields: INodeProperties[] = [
	{
		displayName: 'Source',
		name: 'source',
		type: 'string',
		default: '',
		required: true,
		placeholder: 'e.g. sales',
		description: 'Name of a text-to-SQL source registered on the sllm server',
		displayOptions: { show },
	},
	{
		displayName: 'Question',
		name: 'question',
		type: 'string',
		typeOptions: { rows: 3 },
		default: '',
		required: true,
		placeholder: 'e.g. What were the ten best-selling products yesterday?',
		displayOptions: { show },
	},
	{
		displayName: 'Execute Query',
		name: 'execute',
		type: 'boolean',
		default: true,
		description:
			'Whether the server runs the generated SQL (read-only) and returns the rows, or only returns the SQL',
		displayOptions: { show },
	},
	{
		displayName: 'Max Rows',
		name: 'maxRows',
		type: 'number',
		default: 100,
		typeOptions: { minValue: 1 },
		description: 'The most rows the server returns',
		displayOptions: { show: { ...show, execute: [true] } },
	},
	{
		displayName: 'Output',
		name: 'output',
		type: 'options',
		options: [
			{
				name: 'One Item per Row',
				value: 'rows',
				description: 'Each result row becomes an item, keyed by column name',
			},
			{
				name: 'Single Item',
				value: 'result',
				description: 'One item with sql, columns and rows as the server returned them',
			},
		],
		default: 'result',
		displayOptions: { show },
	},
	{
		displayName: 'Options',
		name: 'options',
		type: 'collection',
		placeholder: 'Add Option',
		default: {},
		displayOptions: { show },
		options: [
			{
				displayName: 'Model',
				name: 'model',
				type: 'string',
				default: '',
				description: 'Model to write the SQL with; empty uses the server default',
			},
		],
	},
];

/** Rows may come as arrays (aligned with `columns`) or as objects; items want objects. */
export function rowsToObjects(columns: unknown, rows: unknown): IDataObject[] {
	if (!Array.isArray(rows)) return [];
	const names = Array.isArray(columns)
		? columns.map((c, index) =>
				c !== null && typeof c === 'object'
					? String((c as IDataObject).name ?? `column_${index + 1}`)
					: String(c),
			)
		: [];
	return rows.map((row) => {
		if (Array.isArray(row)) {
			const record: IDataObject = {};
			row.forEach((value, index) => {
				record[names[index] ?? `column_${index + 1}`] = value as IDataObject[string];
			});
			return record;
		}
		if (row !== null && typeof row === 'object') return row as IDataObject;
		return { value: row as IDataObject[string] };
	});
}

export async function executeTextToSql(
	this: IExecuteFunctions,
	i: number,
): Promise<IDataObject | IDataObject[]> {
	const source = this.getNodeParameter('source', i, '') as string;
	const question = this.getNodeParameter('question', i, '') as string;
	const execute = this.getNodeParameter('execute', i, true) as boolean;
	const output = this.getNodeParameter('output', i, 'result') as string;
	const options = this.getNodeParameter('options', i, {}) as IDataObject;
	if (!source) throw new NodeOperationError(this.getNode(), 'Source is empty', { itemIndex: i });
	if (!question) {
		throw new NodeOperationError(this.getNode(), 'Question is empty', { itemIndex: i });
	}

	const body: IDataObject = { source, question, execute };
	if (execute) body.max_rows = this.getNodeParameter('maxRows', i, 100) as number;
	if (typeof options.model === 'string' && options.model !== '') body.model = options.model;

	const response = (await sllmApiRequest.call(this, {
		method: 'POST',
		path: '/text2sql',
		body,
		itemIndex: i,
	})) as IDataObject;

	if (output === 'rows') {
		return rowsToObjects(response.columns, response.rows);
	}
	return {
		...response,
		sql: response.sql ?? null,
		columns: response.columns ?? [],
		rows: response.rows ?? [],
	};
}
