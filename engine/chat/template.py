"""A chat request's prompt through the model's chat template: tools rendered by the template when it
supports them, by our Hermes preamble otherwise."""

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from engine.chat.messages import content_text, native_messages, text_messages
from engine.chat.tool_prompt import tools_preamble
from engine.chat.tools import as_dict, normalize_tool_choice, normalize_tools, offered_tools
from engine.errors import InvalidRequestError

PLAIN_KEYS = ("role", "content", "name")


def uses_tool_history(messages: list[Mapping[str, Any]]) -> bool:
    """Past calls or tool results in the conversation: rendered in the tool format even when no tools
    are offered now, and our markup filtered from the answer."""
    return any(m.get("role") == "tool" or m.get("tool_calls") for m in messages)


@lru_cache(maxsize=32)
def _template_variables(template: str) -> frozenset[str]:
    import jinja2
    import jinja2.meta

    try:
        return frozenset(jinja2.meta.find_undeclared_variables(jinja2.Environment().parse(template)))
    except jinja2.TemplateSyntaxError:
        return frozenset(re.findall(r"\b\w+\b", template))


def chat_template_text(tokenizer) -> str | None:
    """The template a tool request renders with."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # several named templates: the tool one, if any, is named so
        template = template.get("tool_use") or template.get("default")
    return template if isinstance(template, str) else None


def template_supports_tools(tokenizer) -> bool:
    """A chat template that reads the `tools` variable renders tools itself (Qwen, Llama 3.1,
    Hermes, SmolLM3...); SmolLM2's does not, so it gets our preamble."""
    template = chat_template_text(tokenizer)
    return template is not None and "tools" in _template_variables(template)


def load_chat_template(value: str) -> str:
    """`--chat-template` as vLLM takes it: a file's path, or the Jinja text itself."""
    from pathlib import Path

    path = Path(value).expanduser()
    try:
        if path.is_file():
            return path.read_text()
    except OSError:  # a template's text too long to be a path
        pass
    if "{" not in value:
        raise ValueError(f"chat template {value!r} is neither a file nor a Jinja template")
    return value


def render_chat(tokenizer, messages: list[Any], tools: list[Any] | None = None,
                tool_choice: Any = "auto", *, add_generation_prompt: bool = True,
                **template_kwargs: Any) -> str:
    """The prompt for a chat request. Tools go through the model's chat template when it supports
    them, otherwise into our Hermes-style preamble, merged into the system message if there is one.
    Assistant `tool_calls` and `tool` results in the history are rendered either way.
    `tool_choice="none"` offers no tools (past calls in the history are still shown)."""
    fns = normalize_tools(tools)
    choice = normalize_tool_choice(tool_choice, fns)
    shown = offered_tools(fns, choice)
    msgs = []
    for i, raw in enumerate(messages):
        m = as_dict(raw)
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise InvalidRequestError(f"messages[{i}] needs a role", f"messages[{i}].role")
        msgs.append({**m, "role": "system" if m["role"] == "developer" else m["role"]})
    if not shown and not uses_tool_history(msgs):  # a plain conversation, as the template has it
        rendered = [{k: v for k, v in m.items() if k in PLAIN_KEYS} for m in msgs]
        for i, m in enumerate(rendered):
            m["content"] = content_text(m.get("content"), f"messages[{i}].content")
    elif template_supports_tools(tokenizer):
        rendered = native_messages(msgs)
        if shown:
            template_kwargs["tools"] = [t.to_openai() for t in shown]
    else:
        rendered = text_messages(msgs)
        if shown:
            preamble = tools_preamble(shown, choice)
            if rendered and rendered[0]["role"] == "system":
                system = rendered[0]["content"]
                rendered[0] = {"role": "system", "content": f"{system}\n\n{preamble}" if system else preamble}
            else:
                rendered.insert(0, {"role": "system", "content": preamble})
    try:
        return tokenizer.apply_chat_template(rendered, tokenize=False, add_generation_prompt=add_generation_prompt,
                                             **template_kwargs)
    except InvalidRequestError:
        raise
    except Exception as exc:  # jinja raises for conversations a template refuses (role order, ...)
        raise InvalidRequestError(f"the chat template rejected these messages: {exc}", "messages") from exc
