import { sleep } from 'n8n-workflow';

/** Indirection so tests can run polling loops without real waiting. */
export const clock = {
	sleep: async (ms: number): Promise<void> => await sleep(ms),
	now: (): number => Date.now(),
};

/**
 * Calls `fetch` until `isFinal` holds or `maxWaitSeconds` have passed; returns the last value seen
 * either way (the caller reports a still-running job as such).
 */
export async function pollUntil<T>(
	fetch: () => Promise<T>,
	isFinal: (value: T) => boolean,
	intervalSeconds: number,
	maxWaitSeconds: number,
): Promise<T> {
	const deadline = clock.now() + Math.max(0, maxWaitSeconds) * 1000;
	let value = await fetch();
	while (!isFinal(value) && clock.now() < deadline) {
		const remaining = deadline - clock.now();
		await clock.sleep(Math.max(1, Math.min(intervalSeconds * 1000, remaining)));
		value = await fetch();
	}
	return value;
}
