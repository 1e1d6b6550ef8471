#!/usr/bin/env node
// Checks the JSON that `n8n execute --id=... --rawOutput` printed for one workflow.
//
//   node e2e/check-run.mjs OUTPUT_FILE CHECK_JSON [EXPECT_REGEX]
//
// CHECK_JSON: {"node": "...", "field": "...", "minItems": 1, "also": [{"node", "field", "minItems"}]}.
// Passes when the run has no error and the node's first output holds at least minItems items whose
// `field` is a non-empty value (and, with EXPECT_REGEX, the first one matches it), and so does each
// node in `also` (its values are printed, not matched). With "answers" (a number per item), it also prints
// how many items' `field` holds their number, and fails under E2E_MIN_RIGHT (default 0: only report).
// Prints one line and exits 0 or 1.
import { readFileSync } from 'node:fs';

const [file, checkJson, expect] = process.argv.slice(2);
const check = JSON.parse(checkJson);
const text = readFileSync(file, 'utf8');

function fail(message) {
	console.log(`FAIL ${message}`);
	process.exit(1);
}

// n8n prints the run as pretty JSON (`JSON.stringify(run, null, 2)`) among its log lines: it starts
// with a line "{" and ends with the next line "}".
const lines = text.split(/\r?\n/);
const open = lines.indexOf('{');
const close = open < 0 ? -1 : lines.indexOf('}', open);
if (open < 0 || close < 0) fail('n8n printed no run data (see the log next to the output file)');
let run;
try {
	run = JSON.parse(lines.slice(open, close + 1).join('\n'));
} catch (error) {
	fail(`could not parse n8n's output: ${error.message}`);
}

const resultData = run?.data?.resultData ?? {};
if (resultData.error) {
	const e = resultData.error;
	fail(`workflow error in "${e.node?.name ?? resultData.lastNodeExecuted}": ${e.message}${e.description ? ` (${e.description})` : ''}`);
}
/** The items of `spec.node`'s first output; fails unless it ran without error and gave at least minItems. */
function itemsOf(spec) {
	const runs = resultData.runData?.[spec.node];
	if (!runs?.length) fail(`node "${spec.node}" did not run`);
	const last = runs[runs.length - 1];
	if (last.error) fail(`node "${spec.node}" failed: ${last.error.message}`);
	const items = last.data?.main?.[0] ?? [];
	const minItems = spec.minItems ?? 1;
	if (items.length < minItems) fail(`node "${spec.node}" returned ${items.length} items, expected at least ${minItems}`);
	if (spec.field) {
		for (const [index, item] of items.entries()) {
			const value = item.json?.[spec.field];
			if (value === undefined || value === null || value === '') {
				fail(`item ${index} of "${spec.node}" has no "${spec.field}": ${JSON.stringify(item.json).slice(0, 300)}`);
			}
		}
	}
	return items;
}

const show = (value) => (typeof value === 'string' ? value : JSON.stringify(value)).replace(/\s+/g, ' ');
// Further nodes of the same run that must have given items (`also`: [{node, field, minItems}]).
const alsoLines = (check.also ?? []).map((spec) => {
	const items = itemsOf(spec);
	const values = items.map((item) => show(spec.field ? item.json[spec.field] : item.json).slice(0, 40));
	return `     ${spec.node}.${spec.field ?? '*'}: ${values.join(', ')}`;
});
const items = itemsOf(check);
if (check.answers) {
	// A number counts when it stands alone in the text, with or without thousands separators.
	const holds = (text, n) => new RegExp(`(^|[^\\d.,])${n}(?![\\d]|[.,]\\d)`).test(String(text).replace(/(\d),(?=\d{3}\b)/g, '$1'));
	const right = check.answers.filter((n, i) => items[i] && holds(items[i].json?.[check.field] ?? '', n)).length;
	const min = Number(process.env.E2E_MIN_RIGHT ?? 0);
	for (const [i, n] of check.answers.entries()) {
		const json = items[i]?.json ?? {};
		const said = String(json[check.field] ?? (json.error ? `error: ${json.error}` : ''));
		console.log(`     ${holds(said, n) ? 'right' : 'wrong'} ${n}: ${said.replace(/\s+/g, ' ').slice(0, 100)}`);
	}
	if (right < min) fail(`"${check.node}" answered ${right} of ${check.answers.length} right, under E2E_MIN_RIGHT=${min}`);
	console.log(`ok   ${check.node}: ${right} of ${check.answers.length} answers hold the right number`);
	process.exit(0);
}
const first = check.field ? items[0].json[check.field] : items[0].json;
const shown = typeof first === 'string' ? first : JSON.stringify(first);
if (expect && !new RegExp(expect, 'i').test(shown)) {
	fail(`"${check.node}".${check.field} = ${JSON.stringify(shown.slice(0, 200))} does not match /${expect}/i`);
}
console.log(`ok   ${check.node}.${check.field ?? '*'} (${items.length} item${items.length === 1 ? '' : 's'}): ${show(shown).slice(0, 120)}`);
for (const line of alsoLines) console.log(line);
