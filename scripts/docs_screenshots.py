"""Screenshots for the docs, taken with headless Chromium: the RAG workflow in a real n8n editor (after it
ran against a real server) and two pages of the built docs site.

    SLLM_BASE_URL=http://127.0.0.1:8000/v1 python scripts/docs_screenshots.py

Needs Playwright (`pip install playwright`; no browser download: it drives the machine's Chromium,
`CHROMIUM=/usr/bin/chromium` by default), Node and npm (n8n is installed once into
~/.cache/sllm-n8n-e2e/n8n-VERSION-editor), the package built (`npm run build` in n8n-nodes/) and mkdocs.
Writes docs/img/n8n-rag-workflow.png, docs/img/docs-n8n-page.png and docs/img/docs-embeddings-page.png.
"""

import http.server
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from functools import partial
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "n8n-nodes"
IMG = ROOT / "docs" / "img"
N8N_VERSION = os.environ.get("N8N_VERSION", "1.123.81")
CACHE = Path(os.environ.get("SLLM_N8N_CACHE", Path.home() / ".cache" / "sllm-n8n-e2e"))
# `n8n start` needs the install as the project's notes make it: e2e/run.sh's pins @langchain/core, which the
# editor's AI workflow builder refuses (it imports @langchain/core/utils/uuid, new in 1.4). The workflow shot
# here uses the reranker, whose retriever path does not hit the two-copies problem that pin is for.
N8N_DIR = Path(os.environ.get("SLLM_N8N_EDITOR_DIR", CACHE / f"n8n-{N8N_VERSION}-editor"))
N8N = N8N_DIR / "node_modules" / ".bin" / "n8n"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
WORKFLOW_ID = "sllmE2eRagSllm01"  # the rag-sllm workflow of n8n-nodes/e2e/render.mjs
OWNER = {"email": "docs@example.com", "firstName": "Docs", "lastName": "Shots", "password": "Screenshots1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(url)


def install_n8n() -> None:
    if (N8N_DIR / ".installed").exists():
        return
    N8N_DIR.mkdir(parents=True, exist_ok=True)
    (N8N_DIR / "package.json").write_text(json.dumps({
        "name": "sllm-n8n-editor", "private": True, "dependencies": {"n8n": N8N_VERSION},
        "overrides": {"linkedom": "0.18.12", "xlsx": "0.18.5", "isolated-vm": "5.0.4"}}))
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"],
                   cwd=N8N_DIR, check=True)
    subprocess.run(["npm", "rebuild", "isolated-vm", "sqlite3", "--loglevel=error"], cwd=N8N_DIR, check=True)
    (N8N_DIR / ".installed").touch()


def served_models(base_url: str) -> tuple[str, str]:
    """The chat model and the embeddings model e2e/run.sh would pick (SLLM_EMBED_MODEL overrides it)."""
    with urllib.request.urlopen(f"{base_url}/models", timeout=30) as r:
        ids = [m["id"] for m in json.load(r)["data"]]
    pooled = f"{ids[0]}-embed"
    embed = os.environ.get("SLLM_EMBED_MODEL") or next((i for i in ids if "embed" in i.lower() and i != pooled), pooled)
    return ids[0], embed


def n8n_rag_workflow(base_url: str, work: Path) -> None:
    """Imports the rag-sllm workflow into a throwaway n8n, runs it from the editor and shoots the canvas."""
    install_n8n()
    stage = work / "custom" / "n8n-nodes-sllm"
    stage.mkdir(parents=True)
    shutil.copy(PKG / "package.json", stage)
    shutil.copytree(PKG / "dist", stage / "dist")
    port = free_port()
    env = {**os.environ, "N8N_USER_FOLDER": str(work / "home"), "N8N_CUSTOM_EXTENSIONS": str(work / "custom"),
           "N8N_DIAGNOSTICS_ENABLED": "false", "N8N_RUNNERS_ENABLED": "false", "N8N_PORT": str(port),
           "N8N_ENFORCE_SETTINGS_FILE_PERMISSIONS": "false", "N8N_VERSION_NOTIFICATIONS_ENABLED": "false",
           "N8N_PERSONALIZATION_ENABLED": "false", "N8N_SECURE_COOKIE": "false", "N8N_HIDE_USAGE_PAGE": "true"}
    model, embed_model = served_models(base_url)
    subprocess.run(["node", str(PKG / "e2e" / "render.mjs"), "--out", str(work / "import"), "--base-url", base_url,
                    "--model", model, "--embed-model", embed_model, "--workflows", "rag-sllm"], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    for kind in ("credentials", "workflow"):
        name = "credentials.json" if kind == "credentials" else "workflows.json"
        subprocess.run([str(N8N), f"import:{kind}", f"--input={work / 'import' / name}"], check=True, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = open(work / "n8n.log", "w")
    n8n = subprocess.Popen([str(N8N), "start"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_for(f"{url}/rest/settings", time.monotonic() + 300)  # /healthz answers before the REST routes
        except TimeoutError:
            print((work / "n8n.log").read_text()[-3000:])
            raise
        with sync_playwright() as p:
            p.selectors.set_test_id_attribute("data-test-id")  # n8n's editor names its test ids so
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1600, "height": 1000}, device_scale_factor=1)
            r = page.request.post(f"{url}/rest/owner/setup", data=OWNER)
            assert r.ok, r.text()
            page.goto(f"{url}/workflow/{WORKFLOW_ID}")
            page.wait_for_selector("[data-test-id='canvas-node']", timeout=60_000)
            page.wait_for_timeout(2000)
            page.get_by_test_id("execute-workflow-button").click()
            # Done when nodes have their success marks and none is running any more.
            page.wait_for_function(
                "() => document.querySelectorAll('[data-test-id=\"canvas-node-status-success\"]').length >= 6"
                " && !document.querySelector('[data-test-id=\"canvas-node-status-running\"]')", timeout=300_000)
            page.mouse.move(5, 500)  # no tooltip over the canvas
            page.wait_for_timeout(6000)  # the "executed successfully" toast fades
            page.get_by_test_id("zoom-to-fit").click()
            page.mouse.move(800, 20)
            page.wait_for_timeout(1500)
            page.screenshot(path=str(IMG / "n8n-rag-workflow.png"))
            browser.close()
    finally:
        n8n.terminate()
        n8n.wait(timeout=60)
        log.close()


def docs_pages(work: Path) -> None:
    site = work / "site"
    subprocess.run(["mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT, check=True,
                   env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, stderr=subprocess.DEVNULL)
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            for path, name in (("n8n/", "docs-n8n-page.png"), ("embeddings/", "docs-embeddings-page.png")):
                page.goto(f"{url}/{path}")
                page.wait_for_load_state("networkidle")
                page.screenshot(path=str(IMG / name))
            browser.close()
    finally:
        server.shutdown()


def main() -> None:
    IMG.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sllm-docs-shots-") as tmp:
        work = Path(tmp)
        if os.environ.get("SLLM_BASE_URL"):
            n8n_rag_workflow(os.environ["SLLM_BASE_URL"].rstrip("/"), work)
        else:
            print("SLLM_BASE_URL not set: only the docs pages")
        docs_pages(work)


if __name__ == "__main__":
    main()
