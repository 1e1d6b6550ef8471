import type { IDataObject, ISupplyDataFunctions, NodeConnectionType } from 'n8n-workflow';
import { NodeError, NodeOperationError } from 'n8n-workflow';

/**
 * Runs one call of a sub-node's supplied object and records it as the sub-node's input and output
 * in the editor, as n8n's built-in sub-nodes do; a failure is recorded, then thrown (as an n8n error).
 */
export async function traced<T>(
	ctx: ISupplyDataFunctions,
	connectionType: NodeConnectionType,
	input: IDataObject,
	run: () => Promise<T>,
	output: (result: T) => IDataObject,
): Promise<T> {
	const { index } = ctx.addInputData(connectionType, [[{ json: input }]]);
	try {
		const result = await run();
		ctx.addOutputData(connectionType, index, [[{ json: output(result) }]]);
		return result;
	} catch (error) {
		const failure =
			error instanceof NodeError
				? error
				: new NodeOperationError(ctx.getNode(), error as Error, { functionality: 'configuration-node' });
		ctx.addOutputData(connectionType, index, failure);
		throw failure;
	}
}
