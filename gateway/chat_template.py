"""Chat messages to a prompt string with the model's own chat template.

Text content parts are joined; image, audio and file parts are refused with a 400 that names the
part, since the served models are text-only."""

from typing import Any

from gateway.errors import APIError

TEXT_PARTS = {"text", "input_text", "output_text"}
MEDIA_PARTS = {"image_url", "input_image", "image", "input_audio", "audio", "file", "input_file"}


def _part_field(part: Any, name: str) -> Any:
    return part.get(name) if isinstance(part, dict) else getattr(part, name, None)


def content_text(content: Any, param: str) -> str:
    """A message's content as plain text: a string as is, a list of parts joined by newlines."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for j, part in enumerate(content):
        kind = _part_field(part, "type")
        where = f"{param}[{j}]"
        if kind in TEXT_PARTS:
            text = _part_field(part, "text")
            if not isinstance(text, str):
                raise APIError(400, f"{where}: a {kind} part needs a string `text`", param=where)
            texts.append(text)
        elif kind in MEDIA_PARTS:
            raise APIError(400, f"{where}: {kind} content is not supported; the served model is text-only",
                           param=where, code="unsupported_content")
        else:
            raise APIError(400, f"{where}: unknown content part type {kind!r}", param=where)
    return "\n".join(texts)


def render(tokenizer, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
           **template_kwargs: Any) -> str:
    """`messages` are dicts with role and text content; `developer` is the newer name for `system`."""
    msgs = [{**m, "role": "system" if m["role"] == "developer" else m["role"]} for m in messages]
    try:
        return tokenizer.apply_chat_template(
            msgs, tokenize=False, add_generation_prompt=add_generation_prompt, **template_kwargs
        )
    except Exception as exc:  # jinja raises for conversations the template refuses (role order...)
        raise APIError(400, f"the chat template rejected these messages: {exc}", param="messages") from exc
