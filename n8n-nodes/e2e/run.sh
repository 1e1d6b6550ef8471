#!/usr/bin/env bash
# Opt-in end-to-end check (not part of `npm test`): a real n8n runs workflows that use this package
# and n8n's own OpenAI nodes against an sllm server, headless, with `n8n execute`.
#
#   SLLM_BASE_URL=http://127.0.0.1:8000/v1 [SLLM_MODEL=...] [SLLM_API_KEY=...] bash e2e/run.sh
#   bash e2e/run.sh --fake      # against e2e/fake-sllm.mjs: checks n8n and the nodes, not the server
#
# Environment:
#   SLLM_BASE_URL    server to test, with the /v1 prefix (required unless --fake)
#   SLLM_MODEL       model name; default: the first id from GET $SLLM_BASE_URL/models
#   SLLM_EMBED_MODEL embeddings model for the RAG workflows; default: the first other id with "embed"
#                    from GET /models (sllm's all-MiniLM-L6-v2-embed), else SLLM_MODEL-embed
#   SLLM_API_KEY     key, when the server was started with --api-key
#   E2E_WORKFLOWS    comma-separated subset of: chat, chat-model, agent, agent-math, openai-chat,
#                    openai-responses, rag, rag-sllm, examples (default: all but agent-math and
#                    examples; --fake adds examples)
#   E2E_EXPECT       regex the first answer of each check must match (default: none; set by --fake)
#   N8N_VERSION      n8n to install (default 1.123.81, the version these nodes are tested with)
#   SLLM_N8N_CACHE   where n8n is installed once and reused (default ~/.cache/sllm-n8n-e2e)
#   E2E_LOAD         custom (default: N8N_CUSTOM_EXTENSIONS) or nodes (install the packed tarball
#                    as a community package in the n8n user folder)
#   E2E_KEEP=1       keep the temporary n8n user folder and outputs
#
# Recipe from the project's notes on running n8n headless here: the npm registry lacks a few
# packages n8n pulls in (hence the overrides), native modules must be built locally.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PKG=$(dirname "$HERE")
N8N_VERSION=${N8N_VERSION:-1.123.81}
CACHE_ROOT=${SLLM_N8N_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sllm-n8n-e2e}
N8N_DIR=$CACHE_ROOT/n8n-$N8N_VERSION
N8N=$N8N_DIR/node_modules/.bin/n8n

FAKE=0
for arg in "$@"; do
	case $arg in
		--fake) FAKE=1 ;;
		-h|--help) sed -n '2,27p' "$0"; exit 0 ;;
		*) echo "unknown argument: $arg" >&2; exit 2 ;;
	esac
done

log() { printf '[e2e] %s\n' "$*" >&2; }

if [[ $FAKE == 0 && -z ${SLLM_BASE_URL:-} ]]; then
	echo "set SLLM_BASE_URL (e.g. http://127.0.0.1:8000/v1), or pass --fake; see --help" >&2
	exit 2
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sllm-n8n-e2e.XXXXXX")
FAKE_PID=
cleanup() {
	if [[ -n $FAKE_PID ]]; then kill "$FAKE_PID" 2>/dev/null || true; fi
	if [[ ${E2E_KEEP:-0} == 1 ]]; then log "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# 1. n8n itself, installed once per version (and again when this recipe changes).
#    @langchain/core is pinned to the one version @n8n/n8n-nodes-langchain pins: left to npm, the
#    tree gets a second copy (1.4.x) under @langchain/classic, whose in-memory vector store then fails
#    n8n's `instanceof VectorStore` check in the Vector Store Retriever ("reading 'asRetriever'").
if [[ $N8N_VERSION == 1.123.81 ]]; then N8N_LANGCHAIN_CORE=${N8N_LANGCHAIN_CORE-1.1.8}; fi
CORE_OVERRIDE=${N8N_LANGCHAIN_CORE:+, \"@langchain/core\": \"$N8N_LANGCHAIN_CORE\"}
RECIPE="{ \"name\": \"sllm-n8n-e2e\", \"private\": true,
  \"dependencies\": { \"n8n\": \"$N8N_VERSION\" },
  \"overrides\": { \"linkedom\": \"0.18.12\", \"xlsx\": \"0.18.5\", \"isolated-vm\": \"5.0.4\"$CORE_OVERRIDE } }"
if [[ ! -x $N8N || ! -f $N8N_DIR/.installed ]] || [[ $(cat "$N8N_DIR/package.json" 2>/dev/null) != "$RECIPE" ]]; then
	log "installing n8n $N8N_VERSION into $N8N_DIR (a few minutes, ~1.8 GB)"
	mkdir -p "$N8N_DIR"
	rm -f "$N8N_DIR/.installed"
	printf '%s\n' "$RECIPE" >"$N8N_DIR/package.json"
	(cd "$N8N_DIR" && npm install --no-audit --no-fund --ignore-scripts --loglevel=error \
		&& npm rebuild isolated-vm sqlite3 --loglevel=error)
	touch "$N8N_DIR/.installed"
fi

# 2. This package, built, and staged the way n8n sees it:
#    E2E_LOAD=custom (default): package.json + dist/ in a folder named by N8N_CUSTOM_EXTENSIONS
#      (node types "CUSTOM.sllm", "CUSTOM.lmChatSllm");
#    E2E_LOAD=nodes: the packed tarball installed into the n8n user folder's nodes/ directory,
#      as a community package (node types "n8n-nodes-sllm.sllm", ...).
#    Either way without our node_modules, so n8n-workflow and the AI libraries are n8n's own.
if [[ ! -f $PKG/dist/nodes/Sllm/Sllm.node.js || ${E2E_BUILD:-1} == 1 ]]; then
	if [[ ! -d $PKG/node_modules ]]; then (cd "$PKG" && npm ci --no-audit --no-fund --loglevel=error); fi
	log "building n8n-nodes-sllm"
	(cd "$PKG" && npm run --silent build >"$WORK/build.log" 2>&1) || { cat "$WORK/build.log" >&2; exit 1; }
fi
export N8N_USER_FOLDER=$WORK/home
mkdir -p "$N8N_USER_FOLDER"
case ${E2E_LOAD:-custom} in
	custom)
		STAGE=$WORK/custom/n8n-nodes-sllm
		mkdir -p "$STAGE"
		cp "$PKG/package.json" "$STAGE/"
		cp -R "$PKG/dist" "$STAGE/dist"
		export N8N_CUSTOM_EXTENSIONS=$WORK/custom
		TYPE_PREFIX=CUSTOM
		;;
	nodes)
		(cd "$PKG" && npm pack --silent --pack-destination "$WORK" >/dev/null)
		mkdir -p "$N8N_USER_FOLDER/.n8n/nodes"
		(cd "$N8N_USER_FOLDER/.n8n/nodes" && echo '{"name":"installed-nodes","private":true}' >package.json \
			&& npm install --omit=peer --ignore-scripts --no-audit --no-fund --loglevel=error "$WORK"/n8n-nodes-sllm-*.tgz)
		TYPE_PREFIX=n8n-nodes-sllm
		;;
	*) echo "E2E_LOAD must be custom or nodes" >&2; exit 2 ;;
esac

# 3. The server.
if [[ $FAKE == 1 ]]; then
	node "$HERE/fake-sllm.mjs" 0 >"$WORK/fake.log" 2>&1 &
	FAKE_PID=$!
	for _ in $(seq 50); do
		SLLM_BASE_URL=$(sed -n 's/^listening //p' "$WORK/fake.log")
		[[ -n $SLLM_BASE_URL ]] && break
		sleep 0.1
	done
	[[ -n ${SLLM_BASE_URL:-} ]] || { cat "$WORK/fake.log" >&2; exit 1; }
	SLLM_MODEL=${SLLM_MODEL:-fake-model}
	E2E_WORKFLOWS=${E2E_WORKFLOWS:-chat,chat-model,agent,openai-chat,openai-responses,rag,rag-sllm,examples}
	E2E_EXPECT=${E2E_EXPECT-'pong|4|positive|\||Quenby'}
	log "fake sllm at $SLLM_BASE_URL"
fi
: "${SLLM_BASE_URL:?set SLLM_BASE_URL (e.g. http://127.0.0.1:8000/v1) or pass --fake}"
SLLM_BASE_URL=${SLLM_BASE_URL%/}
E2E_WORKFLOWS=${E2E_WORKFLOWS:-chat,chat-model,agent,openai-chat,openai-responses,rag,rag-sllm}
E2E_EXPECT=${E2E_EXPECT:-}

if [[ -z ${SLLM_MODEL:-} ]]; then
	SLLM_MODEL=$(SLLM_BASE_URL=$SLLM_BASE_URL SLLM_API_KEY=${SLLM_API_KEY:-} node -e '
		const headers = process.env.SLLM_API_KEY ? { authorization: `Bearer ${process.env.SLLM_API_KEY}` } : {};
		fetch(`${process.env.SLLM_BASE_URL}/models`, { headers })
			.then(async (r) => { if (!r.ok) throw new Error(`GET /models: HTTP ${r.status} ${await r.text()}`); return r.json(); })
			.then((b) => { if (!b.data?.length) throw new Error("GET /models listed no model"); console.log(b.data[0].id); })
			.catch((e) => { console.error(e.message); process.exit(1); });')
fi
if [[ -z ${SLLM_EMBED_MODEL:-} ]]; then
	# The server's own embedding model (sllm's default all-MiniLM-L6-v2-embed) when it lists one, else the
	# chat model's pooled states.
	SLLM_EMBED_MODEL=$(SLLM_BASE_URL=$SLLM_BASE_URL SLLM_API_KEY=${SLLM_API_KEY:-} SLLM_MODEL=$SLLM_MODEL node -e '
		const headers = process.env.SLLM_API_KEY ? { authorization: `Bearer ${process.env.SLLM_API_KEY}` } : {};
		const pooled = `${process.env.SLLM_MODEL}-embed`;
		fetch(`${process.env.SLLM_BASE_URL}/models`, { headers })
			.then((r) => r.json())
			.then((b) => console.log((b.data ?? []).map((m) => m.id).find((id) => /embed/i.test(id) && id !== pooled) ?? pooled))
			.catch(() => console.log(pooled));')
fi
log "server $SLLM_BASE_URL, model $SLLM_MODEL, embeddings $SLLM_EMBED_MODEL, workflows $E2E_WORKFLOWS"

# 4. A throwaway n8n instance.
export N8N_DIAGNOSTICS_ENABLED=false N8N_RUNNERS_ENABLED=false N8N_ENFORCE_SETTINGS_FILE_PERMISSIONS=false
export N8N_VERSION_NOTIFICATIONS_ENABLED=false N8N_PERSONALIZATION_ENABLED=false
# n8n prints the run data itself at log level info.
export N8N_LOG_LEVEL=${N8N_LOG_LEVEL:-info}

node "$HERE/render.mjs" --out "$WORK/import" --base-url "$SLLM_BASE_URL" --model "$SLLM_MODEL" \
	--embed-model "${SLLM_EMBED_MODEL:-}" --api-key "${SLLM_API_KEY:-}" --workflows "$E2E_WORKFLOWS" --prefix "$TYPE_PREFIX" >"$WORK/render.log"
"$N8N" import:credentials --input="$WORK/import/credentials.json" >"$WORK/import-credentials.log" 2>&1 \
	|| { cat "$WORK/import-credentials.log" >&2; exit 1; }
"$N8N" import:workflow --input="$WORK/import/workflows.json" >"$WORK/import-workflows.log" 2>&1 \
	|| { cat "$WORK/import-workflows.log" >&2; exit 1; }

# 5. Run each workflow and check its output.
failures=0
count=$(node -p "require('$WORK/import/checks.json').length")
for ((i = 0; i < count; i++)); do
	check=$(node -p "JSON.stringify(require('$WORK/import/checks.json')[$i])")
	id=$(node -p "($check).id")
	name=$(node -p "($check).name")
	out=$WORK/run-$id.json
	log "running $name"
	set +e
	timeout "${E2E_TIMEOUT:-300}" "$N8N" execute --id="$id" --rawOutput >"$out" 2>&1
	status=$?
	set -e
	if node "$HERE/check-run.mjs" "$out" "$check" "$E2E_EXPECT"; then
		:
	else
		failures=$((failures + 1))
		log "n8n exit status $status; last lines of its output ($out):"
		tail -n 15 "$out" >&2 || true
	fi
done

if [[ $failures -gt 0 ]]; then
	log "$failures of $count workflows failed"
	E2E_KEEP=1
	exit 1
fi
log "all $count workflows passed"
