import { randomBytes } from 'crypto';

export interface MultipartFile {
	field: string;
	filename: string;
	contentType: string;
	content: Buffer | string;
}

export interface MultipartBody {
	body: Buffer;
	contentType: string;
}

function escapeQuoted(value: string): string {
	return value
		.replace(/\\/g, '\\\\')
		.replace(/"/g, '\\"')
		.replace(/[\r\n]/g, ' ');
}

/**
 * A `multipart/form-data` body built by hand, so the upload does not depend on which FormData
 * implementation the n8n version at hand passes through to its HTTP client.
 */
export function buildMultipart(fields: Record<string, string>, file: MultipartFile): MultipartBody {
	const boundary = `----sllm-n8n-${randomBytes(12).toString('hex')}`;
	const parts: Buffer[] = [];
	for (const [name, value] of Object.entries(fields)) {
		parts.push(
			Buffer.from(
				`--${boundary}\r\nContent-Disposition: form-data; name="${escapeQuoted(name)}"\r\n\r\n${value}\r\n`,
				'utf8',
			),
		);
	}
	parts.push(
		Buffer.from(
			`--${boundary}\r\nContent-Disposition: form-data; name="${escapeQuoted(file.field)}"; ` +
				`filename="${escapeQuoted(file.filename)}"\r\nContent-Type: ${file.contentType}\r\n\r\n`,
			'utf8',
		),
	);
	parts.push(Buffer.isBuffer(file.content) ? file.content : Buffer.from(file.content, 'utf8'));
	parts.push(Buffer.from(`\r\n--${boundary}--\r\n`, 'utf8'));
	return { body: Buffer.concat(parts), contentType: `multipart/form-data; boundary=${boundary}` };
}
