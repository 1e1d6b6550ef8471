#!/usr/bin/env node
// Run after `npm install` changes package-lock.json:  node scripts/complete-lockfile.mjs
//
// The npm registry reachable from the build machines lacks most of unrs-resolver's per-platform
// binaries (an optional dependency of the linter's import resolver; only the linux ones exist
// there). npm then leaves them out of package-lock.json and `npm ci` refuses the lock file
// ("Missing: @unrs/resolver-binding-... from lock file"). This adds the missing entries with
// their os/cpu/libc, exactly as npm writes them for optional platform packages, so `npm ci`
// skips them on other platforms here and fetches them normally elsewhere.
import { readFileSync, writeFileSync } from 'node:fs';

const file = new URL('../package-lock.json', import.meta.url);
const lock = JSON.parse(readFileSync(file, 'utf8'));
const packages = lock.packages;

const platform = (name) => {
	const target = name.replace('@unrs/resolver-binding-', '');
	const [os, cpu, abi] = target.split('-');
	const entry = { os: [os], cpu: [cpu === 'arm' ? 'arm' : cpu] };
	if (os === 'linux') entry.libc = [abi?.startsWith('musl') ? 'musl' : 'glibc'];
	return entry;
};

let added = 0;
for (const [path, pkg] of Object.entries(packages)) {
	if (!path.endsWith('node_modules/unrs-resolver')) continue;
	const base = path.slice(0, -'unrs-resolver'.length);
	for (const [name, version] of Object.entries(pkg.optionalDependencies ?? {})) {
		const key = `${base}${name}`;
		if (packages[key] || packages[`node_modules/${name}`]) continue;
		if (name.includes('wasm32')) continue;
		const { os, cpu, libc } = platform(name);
		packages[key] = {
			version,
			cpu,
			dev: pkg.dev ?? undefined,
			...(libc ? { libc } : {}),
			license: 'MIT',
			optional: true,
			os,
		};
		added++;
	}
}
const sorted = Object.fromEntries(
	Object.entries(packages).sort(([a], [b]) => (a === '' ? -1 : b === '' ? 1 : a.localeCompare(b))),
);
lock.packages = sorted;
writeFileSync(file, JSON.stringify(lock, null, '\t') + '\n');
console.log(`added ${added} lock entries`);
