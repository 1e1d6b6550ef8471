"""`sllm serve --config FILE`: the server's settings from a TOML or YAML file, the same names as the
flags (with underscores), plus a `models` list for several embedded and upstream models. Flags given
on the command line (or by SLLM_* variables) win over the file. See examples/sllm.toml."""

import tomllib
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from gateway.settings import ModelEntry, Settings, UpstreamURL


class ConfigError(ValueError):
    pass


def load_config(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read the configuration file {path}: {exc.strerror}") from None
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            raise ConfigError(f"{path}: the configuration file must end in .toml, .yaml or .yml")
    except (tomllib.TOMLDecodeError, ImportError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a table of settings at the top level")
    unknown = sorted(set(data) - set(Settings.model_fields))
    if unknown:
        raise ConfigError(f"{path}: unknown settings {', '.join(unknown)} (known: {', '.join(Settings.model_fields)})")
    return data


class ConfigFileSource(PydanticBaseSettingsSource):
    """A TOML or YAML file as a pydantic-settings source (Settings.from_sources)."""

    def __init__(self, settings_cls: type[BaseSettings], path: str | Path):
        super().__init__(settings_cls)
        self.values = load_config(path)

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self.values.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self.values)


def parse_upstream(text: str) -> tuple[str, UpstreamURL]:
    """`--upstream NAME=URL[,model=NAME_THERE][,api_key=KEY][,api_key_env=VAR]`: one URL of model NAME
    (repeat the flag with the same NAME for several URLs, load-balanced)."""
    name, sep, rest = text.partition("=")
    if not sep or not name.strip() or not rest.strip():
        raise ConfigError(f"--upstream {text!r}: expected NAME=URL[,model=...][,api_key_env=...]")
    url, *options = rest.split(",")
    fields: dict[str, str] = {"url": url.strip()}
    for opt in options:
        key, sep, value = opt.partition("=")
        if not sep or key.strip() not in ("model", "api_key", "api_key_env"):
            raise ConfigError(f"--upstream {name}: unknown option {opt!r} (model, api_key, api_key_env)")
        fields[key.strip()] = value.strip()
    if not fields["url"].startswith(("http://", "https://")):
        raise ConfigError(f"--upstream {name}: {fields['url']!r} is not an http(s) URL")
    return name.strip(), UpstreamURL(**fields)


def cli_models(models: list[str], served_names: list[str], upstreams: list[str]) -> list[ModelEntry]:
    """The `models` list the flags describe: each --model (named by the --served-model-name at the
    same position), then each upstream name with its URLs in flag order."""
    if len(served_names) > len(models):
        raise ConfigError("more --served-model-name than --model flags: they pair by position")
    entries = [ModelEntry(model=m, name=served_names[i] if i < len(served_names) else None)
               for i, m in enumerate(models)]
    grouped: dict[str, list[UpstreamURL]] = {}
    for text in upstreams:
        name, url = parse_upstream(text)
        grouped.setdefault(name, []).append(url)
    entries += [ModelEntry(name=name, upstream=urls) for name, urls in grouped.items()]
    return entries
