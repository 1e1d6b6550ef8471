import type { IDataObject } from 'n8n-workflow';

export function toJsonl(records: IDataObject[]): string {
	return records.map((record) => JSON.stringify(record)).join('\n') + '\n';
}

export interface JsonlLine {
	line: number;
	value?: IDataObject;
	error?: string;
	raw?: string;
}

/**
 * Parses a JSONL download. The HTTP helper may hand the body over as a string, a Buffer, or — when
 * the file holds a single line and something parsed it already — as an object.
 */
export function parseJsonl(content: unknown): JsonlLine[] {
	if (content === undefined || content === null || content === '') return [];
	if (!Buffer.isBuffer(content) && typeof content === 'object') {
		const values = Array.isArray(content) ? content : [content];
		return values.map((value, index) => ({ line: index + 1, value: value as IDataObject }));
	}
	const text = Buffer.isBuffer(content) ? content.toString('utf8') : String(content);
	const lines: JsonlLine[] = [];
	text.split(/\r?\n/).forEach((raw, index) => {
		if (raw.trim() === '') return;
		try {
			const value = JSON.parse(raw) as unknown;
			if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
				lines.push({ line: index + 1, value: value as IDataObject });
			} else {
				lines.push({ line: index + 1, error: 'Line is not a JSON object', raw });
			}
		} catch (error) {
			lines.push({ line: index + 1, error: `Invalid JSON: ${(error as Error).message}`, raw });
		}
	});
	return lines;
}
