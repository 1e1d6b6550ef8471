"""`sllm serve --config`, --model/--served-model-name pairs and --upstream flags: what Settings they
make, and the clear errors for what they cannot mean."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine import EngineConfig
from engine.cli import app
from gateway.config_file import ConfigError, ConfigFileSource, cli_models, load_config, parse_upstream
from gateway.registry import ModelRegistry
from gateway.settings import Settings

EXAMPLE = Path(__file__).parents[2] / "gateway" / "examples" / "sllm.toml"


def test_the_shipped_example_loads_into_an_embedded_and_an_upstream_model(monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", "sk-cluster")
    settings = Settings(**load_config(EXAMPLE))
    small, big = settings.model_entries()
    assert (small.served_name, small.model, small.is_upstream) == ("smollm2", "default", False)
    assert big.is_upstream and [u.url for u in big.upstream] == ["http://gpu-1.internal:8000/v1",
                                                                 "http://gpu-2.internal:8000/v1"]
    config = settings.engine_config(small)
    assert config.max_num_seqs == 64 and config.kv_cache_bytes == 2**30 and config.served_model_name == "smollm2"
    assert settings.engine_config(small).block_size == settings.block_size  # server-wide value where unset
    pool = ModelRegistry.from_settings(settings).models["llama-70b"].pool
    assert [(t.model, t.api_key) for t in pool.targets] == [("meta-llama/Llama-3.3-70B-Instruct", "sk-cluster")] * 2


def test_flags_win_over_variables_which_win_over_the_file_which_wins_over_defaults(tmp_path, monkeypatch):
    f = tmp_path / "sllm.toml"
    f.write_text('port = 9000\nmax_num_seqs = 8\nlog_level = "debug"\n')
    monkeypatch.setenv("SLLM_PORT", "9001")
    monkeypatch.setenv("SLLM_MAX_NUM_SEQS", "9")
    monkeypatch.setenv("SLLM_API_KEY", "sk-a sk-b")  # lists space-separated, as the flags' variables took them
    monkeypatch.setenv("SLLM_LORA_MODULES", "a=/x b=/y")
    settings = Settings.from_sources({"port": 9002}, ConfigFileSource(Settings, f))
    assert (settings.port, settings.max_num_seqs, settings.log_level) == (9002, 9, "debug")
    assert settings.api_keys == ["sk-a", "sk-b"] and settings.lora_modules == {"a": "/x", "b": "/y"}
    assert settings.block_size == EngineConfig.block_size  # set nowhere: the engine's default
    # Settings built in code (tests, benchmarks) take their arguments only.
    assert Settings().port == 8000 and Settings().max_num_seqs == EngineConfig.max_num_seqs


def test_yaml_works_the_same(tmp_path):
    f = tmp_path / "sllm.yaml"
    f.write_text("port: 9000\nmodels:\n  - model: default\n  - name: big\n    upstream: http://h:1/v1\n")
    settings = Settings(**load_config(f))
    assert settings.port == 9000 and [m.served_name for m in settings.model_entries()][1] == "big"


@pytest.mark.parametrize(("text", "problem"), [
    ("nonsense = 1\n", "unknown settings nonsense"),
    ("port = \n", "sllm.toml"),
])
def test_bad_files_are_named_errors(tmp_path, text, problem):
    f = tmp_path / "sllm.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=problem):
        load_config(f)
    ini = tmp_path / "sllm.ini"
    ini.write_text(text)
    with pytest.raises(ConfigError, match="must end in"):
        load_config(ini)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml")


def test_models_must_be_one_kind_named_and_unique():
    with pytest.raises(ValueError, match="exactly one of"):
        Settings(models=[{"name": "x", "model": "default", "upstream": "http://h/v1"}])
    with pytest.raises(ValueError, match="needs a `name`"):
        Settings(models=[{"upstream": "http://h/v1"}])
    with pytest.raises(ValueError, match="served more than once: a"):
        Settings(models=[{"name": "a", "model": "default"}, {"name": "a", "upstream": "http://h/v1"}])


def test_upstream_flags_group_urls_by_name():
    assert parse_upstream("big=http://h:1/v1,model=meta/llama,api_key_env=K")[1].model == "meta/llama"
    entries = cli_models(["default", "/m/qwen"], ["smol"], ["big=http://a/v1", "big=http://b/v1", "other=https://c/v1"])
    assert [(e.served_name, e.is_upstream) for e in entries][:1] == [("smol", False)]
    assert entries[1].model == "/m/qwen" and not entries[1].name
    assert [[u.url for u in e.upstream] for e in entries[2:]] == [["http://a/v1", "http://b/v1"], ["https://c/v1"]]
    for bad, problem in (("big", "NAME=URL"), ("big=ftp://x", "not an http"), ("big=http://x,colour=red", "unknown")):
        with pytest.raises(ConfigError, match=problem):
            parse_upstream(bad)
    with pytest.raises(ConfigError, match="pair by position"):
        cli_models(["default"], ["a", "b"], [])


def test_serve_refuses_a_bad_configuration_before_starting(tmp_path):
    f = tmp_path / "sllm.toml"
    f.write_text('[[models]]\nname = "x"\n')
    result = CliRunner().invoke(app, ["serve", "--config", str(f)])
    assert result.exit_code != 0 and "exactly one of" in result.output
    result = CliRunner().invoke(app, ["serve", "--upstream", "nourl"])
    assert result.exit_code != 0 and "NAME=URL" in result.output


def test_hybrid_prefix_caching_settings_reach_the_engine(tmp_path):
    """--mamba-block-size and --max-state-snapshots, server-wide or per models entry (EngineConfig's names)."""
    f = tmp_path / "sllm.toml"
    f.write_text('mamba_block_size = 64\n[[models]]\nmodel = "default"\n[[models]]\nname = "q"\nmodel = "/m/qwen3.5"\n'
                 'mamba_block_size = 32\nmax_state_snapshots = 8\n')
    settings = Settings(**load_config(f))
    first, qwen = (settings.engine_config(e) for e in settings.model_entries())
    assert (first.mamba_block_size, first.max_state_snapshots) == (64, None)
    assert (qwen.mamba_block_size, qwen.max_state_snapshots) == (32, 8)
    assert Settings().engine_config().mamba_block_size == EngineConfig.mamba_block_size
    with pytest.raises(ValueError, match="max_state_snapshots"):
        Settings(max_state_snapshots=0)
    result = CliRunner().invoke(app, ["serve", "--max-state-snapshots", "0"])
    assert result.exit_code != 0 and "max_state_snapshots" in result.output
