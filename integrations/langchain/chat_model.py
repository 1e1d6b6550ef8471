"""ChatSLLM: a LangChain chat model that runs sllm's engine in this process, no server needed.

Tool calls and structured output go through the same chat layer as the gateway (engine/chat):
the chat template or our Hermes preamble for the prompt, grammar-constrained decoding so a 135M model
still emits calls whose arguments parse and match their schema, and the same parser for the text."""

import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Literal

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LangSmithParams, LanguageModelInput
from langchain_core.language_models.chat_models import agenerate_from_stream, generate_from_stream
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.tool import invalid_tool_call, tool_call, tool_call_chunk
from langchain_core.messages.utils import convert_to_openai_messages
from langchain_core.output_parsers import JsonOutputKeyToolsParser, JsonOutputParser, PydanticOutputParser
from langchain_core.output_parsers.openai_tools import PydanticToolsParser
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableMap, RunnablePassthrough
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_core.utils.pydantic import is_basemodel_subclass
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from engine import AsyncEngine, RequestOutput, SamplingParams
from engine.chat import (
    ChatOutputParser,
    ChatRequest,
    ContentDelta,
    PreparedChat,
    ReasoningDelta,
    StreamEvent,
    ToolCall,
    ToolCallStart,
    collect,
    prepare_chat,
)
from integrations.langchain.engines import iterate_sync, run_sync, shared_engine


@dataclass
class _Request:
    engine: AsyncEngine
    chat: PreparedChat
    model_name: str
    lora: str | None = None  # a LoRA adapter of the engine (engine_config's lora_modules)


def _usage(out: RequestOutput) -> UsageMetadata:
    prompt, completion = len(out.prompt_token_ids), len(out.outputs[0].token_ids)
    return UsageMetadata(input_tokens=prompt, output_tokens=completion, total_tokens=prompt + completion,
                         input_token_details={"cache_read": out.metrics.cached_tokens})


def _lc_tool_calls(calls: list[ToolCall]) -> tuple[list, list]:
    """Valid calls and, apart, the ones whose arguments are no JSON object (cut off by max_tokens)."""
    valid, invalid = [], []
    for c in calls:
        try:
            args = json.loads(c.arguments)
        except json.JSONDecodeError:
            args = None
        if isinstance(args, dict):
            valid.append(tool_call(name=c.name, args=args, id=c.id))
        else:
            invalid.append(invalid_tool_call(name=c.name, args=c.arguments, id=c.id,
                                             error="the arguments are not a complete JSON object"))
    return valid, invalid


def _reasoning(events: list[StreamEvent]) -> dict[str, str]:
    """A reasoning model's thinking as `additional_kwargs["reasoning_content"]`, where ChatDeepSeek, Ollama
    and Groq put it and langchain-core reads it as a reasoning content block (ChatOpenAI drops the field);
    streamed, its string fragments are joined when chunks are added."""
    thinking = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    return {"reasoning_content": thinking} if thinking else {}


def _events_chunk(events: list[StreamEvent]) -> AIMessageChunk | None:
    """One message chunk for the parser events of one engine delta: one tool_call_chunk per call
    index, since chunks with the same index inside one message would not be merged."""
    text = "".join(e.text for e in events if isinstance(e, ContentDelta))
    reasoning = _reasoning(events)
    by_index: dict[int, dict[str, Any]] = {}
    for e in events:
        if isinstance(e, ContentDelta | ReasoningDelta):  # thinking is not the message's content
            continue
        entry = by_index.setdefault(e.index, {"name": None, "id": None, "args": ""})
        if isinstance(e, ToolCallStart):
            entry["name"], entry["id"] = e.name, e.id
        else:
            entry["args"] += e.delta
    if not text and not by_index and not reasoning:
        return None
    chunks = [tool_call_chunk(name=v["name"], args=v["args"], id=v["id"], index=i) for i, v in by_index.items()]
    return AIMessageChunk(content=text, tool_call_chunks=chunks, additional_kwargs=reasoning)


def _openai_messages(messages: list[BaseMessage]) -> list[dict[str, Any]]:
    """LangChain messages in OpenAI's shape. An AIMessage in LangChain's v1 output format repeats its
    calls as `tool_call` content blocks; they are in `tool_calls` already, so they are dropped."""
    out = convert_to_openai_messages(messages)
    for m in out:
        if isinstance(m.get("content"), list):
            m["content"] = [p for p in m["content"] if not (isinstance(p, dict) and p.get("type") == "tool_call")]
    return out


def _tool_choice(choice: Any, names: list[str]) -> Any:
    """LangChain's spellings to OpenAI's: a tool's name, "any" or True mean a forced call."""
    if choice is None or choice in ("auto", "none", "required") or isinstance(choice, dict):
        return choice
    if choice == "any" or choice is True:
        return "required"
    if isinstance(choice, str) and choice in names:
        return {"type": "function", "function": {"name": choice}}
    raise ValueError(f"tool_choice must be 'auto', 'none', 'any', 'required', True or one of {names}, got {choice!r}")


class ChatSLLM(BaseChatModel):
    """A chat model served by the embedded sllm engine in this process.

    ```python
    llm = ChatSLLM(model="default", temperature=0, max_tokens=64)
    llm.bind_tools([get_weather]).invoke("Weather in Seoul?").tool_calls
    ```
    Every ChatSLLM with the same `model` and `engine_config` shares one engine (loaded on first use),
    so requests from all of them are batched together."""

    model_config = ConfigDict(populate_by_name=True)

    model_name: str = Field(default="default", alias="model")
    """"default" (SmolLM2-135M-Instruct), a Hugging Face folder or a .gguf file."""
    temperature: float = 0.7
    """Lower than OpenAI's 1.0: a 135M model wanders off topic at 1.0."""
    max_tokens: int | None = None
    """None: until the model stops or the context is full."""
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] | None = None
    streaming: bool = False
    """`invoke` streams internally (callbacks see tokens) when set."""
    parallel_tool_calls: bool = False
    """Off by default, unlike OpenAI: small models given the chance repeat a call until max_tokens.
    `bind_tools(..., parallel_tool_calls=True)` turns it on per binding."""
    avoid_repeated_calls: bool = False
    """Steer an answer off repeating a tool call whose result is already in the messages (an agent
    loop that calls the same tool with the same arguments again); per call as a keyword too."""
    engine_config: dict[str, Any] = Field(default_factory=dict)
    """EngineConfig settings (num_kv_blocks, max_num_seqs, device, ...); one engine per distinct value.
    With `enable_lora` and `lora_modules` ({name: PEFT folder}), a `model` (here or per call) that names
    one of those adapters runs on the `base_model` engine with that adapter, batched with the others."""
    base_model: str = "default"
    """The engine a LoRA adapter's `model` name runs on."""
    # Accepted so ChatSLLM drops in where ChatOpenAI-style settings are passed; in process there is
    # nothing to authenticate, time out or retry.
    timeout: float | None = None
    max_retries: int | None = None
    api_key: SecretStr | None = None

    @property
    def _llm_type(self) -> str:
        return "sllm"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name, "temperature": self.temperature, "max_tokens": self.max_tokens,
                "top_p": self.top_p, "seed": self.seed, "engine_config": self.engine_config}

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        params = LangSmithParams(ls_provider="sllm", ls_model_name=kwargs.get("model") or self.model_name,
                                 ls_model_type="chat", ls_temperature=kwargs.get("temperature", self.temperature))
        max_tokens = kwargs.get("max_tokens", self.max_tokens)
        if max_tokens is not None:
            params["ls_max_tokens"] = max_tokens
        if stop := stop or self.stop:
            params["ls_stop"] = stop
        return params

    # -- requests -----------------------------------------------------------------------------------
    def _request(self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any]) -> _Request:
        model = kwargs.get("model") or self.model_name
        lora = model if model in (self.engine_config.get("lora_modules") or {}) else None
        engine = shared_engine(self.base_model if lora else model, self.engine_config)
        parallel = kwargs.get("parallel_tool_calls")
        chat = ChatRequest(_openai_messages(messages), kwargs.get("tools") or None, kwargs.get("tool_choice"),
                           self.parallel_tool_calls if parallel is None else parallel, kwargs.get("response_format"),
                           avoid_repeated_calls=kwargs.get("avoid_repeated_calls", self.avoid_repeated_calls))
        params = SamplingParams(
            temperature=kwargs.get("temperature", self.temperature), top_p=kwargs.get("top_p", self.top_p),
            max_tokens=kwargs.get("max_tokens", self.max_tokens), seed=kwargs.get("seed", self.seed),
            stop=list(stop if stop is not None else self.stop or []),
        )
        return _Request(engine, prepare_chat(engine.tokenizer, chat, params, engine.chat_options), model, lora)

    def _metadata(self, req: _Request, out: RequestOutput, called: bool) -> dict[str, Any]:
        finish = "tool_calls" if called else out.outputs[0].finish_reason
        return {"model_name": req.lora or req.engine.served_model_name, "finish_reason": finish,
                "model_provider": "sllm"}

    async def _parsed(self, req: _Request, parser: ChatOutputParser
                      ) -> AsyncIterator[tuple[RequestOutput, list[StreamEvent]]]:
        """The engine's outputs with their parser events; a repeated call (which the parser drops,
        with all after it) stops the engine's sequence there instead of at max_tokens."""
        request_id = uuid.uuid4().hex
        async for out in req.engine.generate(req.chat.prompt, req.chat.params, request_id, lora_request=req.lora):
            repeated_before = parser.ended_by_repeat
            events = parser.feed(out.outputs[0].delta_text, finished=out.finished)
            if parser.ended_by_repeat and not repeated_before and not out.finished:
                req.engine.stop_sequence(request_id)
            yield out, events

    async def _complete(self, messages, stop, kwargs) -> ChatResult:
        req = self._request(messages, stop, kwargs)
        parser = req.chat.output_parser()
        out, events = None, []
        async for latest, delta_events in self._parsed(req, parser):
            out = latest
            events += delta_events
        assert out is not None
        content, calls = collect(events)
        if not req.chat.parses_calls:  # the text as it is (or filtered), not None when empty
            content = content or ""
        valid, invalid = _lc_tool_calls(calls)
        meta = self._metadata(req, out, bool(calls))
        message = AIMessage(content=content or "", tool_calls=valid, invalid_tool_calls=invalid,
                            additional_kwargs=_reasoning(events), usage_metadata=_usage(out), response_metadata=meta)
        return ChatResult(generations=[ChatGeneration(message=message,
                                                      generation_info={"finish_reason": meta["finish_reason"]})])

    async def _chunks(self, messages, stop, kwargs) -> AsyncIterator[ChatGenerationChunk]:
        req = self._request(messages, stop, kwargs)
        parser = req.chat.output_parser()
        last: RequestOutput | None = None
        async for latest, events in self._parsed(req, parser):
            last = latest
            chunk = _events_chunk(events)
            if chunk is not None:
                yield ChatGenerationChunk(message=chunk)
        assert last is not None
        meta = self._metadata(req, last, bool(parser.tool_calls))
        # Usage once, on the closing chunk, as OpenAI's stream_options.include_usage does.
        yield ChatGenerationChunk(
            message=AIMessageChunk(content="", usage_metadata=_usage(last), response_metadata=meta,
                                   chunk_position="last"),
            generation_info={"finish_reason": meta["finish_reason"]},
        )

    # -- BaseChatModel ------------------------------------------------------------------------------
    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        if self.streaming:
            return generate_from_stream(self._stream(messages, stop, run_manager, **kwargs))
        return run_sync(self._complete(messages, stop, kwargs))

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        if self.streaming:
            return await agenerate_from_stream(self._astream(messages, stop, run_manager, **kwargs))
        return await self._complete(messages, stop, kwargs)

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        for chunk in iterate_sync(self._chunks(messages, stop, kwargs)):
            if run_manager:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk

    async def _astream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                       run_manager: AsyncCallbackManagerForLLMRun | None = None,
                       **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        async for chunk in self._chunks(messages, stop, kwargs):
            if run_manager:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk

    # -- tools and structured output ------------------------------------------------------------------
    def bind_tools(self, tools: Sequence[dict[str, Any] | type | Callable | BaseTool], *,
                   tool_choice: str | bool | dict | None = None, parallel_tool_calls: bool | None = None,
                   strict: bool | None = None, **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        """Tools in any form LangChain converts (BaseTool, function, pydantic, TypedDict, JSON schema).
        `tool_choice`: "auto", "none", "any"/"required"/True (a call is forced) or a tool's name."""
        formatted = [convert_to_openai_tool(t, strict=strict) for t in tools]
        choice = _tool_choice(tool_choice, [t["function"]["name"] for t in formatted])
        if choice is not None:
            kwargs["tool_choice"] = choice
        if parallel_tool_calls is not None:
            kwargs["parallel_tool_calls"] = parallel_tool_calls
        return super().bind(tools=formatted, **kwargs)

    def with_structured_output(
        self, schema: dict | type | None = None, *,
        method: Literal["json_schema", "function_calling", "json_mode"] = "json_schema",
        include_raw: bool = False, strict: bool | None = None, **kwargs: Any,
    ) -> Runnable[LanguageModelInput, dict | BaseModel]:
        """`json_schema` (default): the whole reply is constrained to the schema. `function_calling`:
        a forced call of a tool shaped like the schema. `json_mode`: any JSON object. All three are
        enforced by grammar-constrained decoding, so the reply always parses."""
        if kwargs:
            raise ValueError(f"unsupported arguments {sorted(kwargs)}")
        if method == "json_mode" and strict is not None:
            raise ValueError("strict is not supported with method='json_mode'")
        if schema is None and method != "json_mode":
            raise ValueError(f"method={method!r} needs a schema")
        pydantic = isinstance(schema, type) and is_basemodel_subclass(schema)  # v1 or v2
        fmt = {"kwargs": {"method": method, "strict": strict}, "schema": schema}
        if method == "function_calling":
            name = convert_to_openai_tool(schema)["function"]["name"]
            llm = self.bind_tools([schema], tool_choice=name, parallel_tool_calls=False, strict=strict,
                                  ls_structured_output_format=fmt)
            parser: Runnable = (PydanticToolsParser(tools=[schema], first_tool_only=True) if pydantic
                                else JsonOutputKeyToolsParser(key_name=name, first_tool_only=True))
        elif method in ("json_schema", "json_mode"):
            # json_mode with a schema is constrained to that schema too: OpenAI's json_mode promises
            # only some JSON object, but the parser below needs this schema, and grammar-constrained
            # decoding can give it at no cost; a 135M model does not follow keys asked for in words.
            if schema is not None:
                fn = convert_to_openai_tool(schema)["function"]
                response_format = {"type": "json_schema",
                                   "json_schema": {"name": fn["name"], "schema": fn["parameters"], "strict": True}}
            else:
                response_format = {"type": "json_object"}
            if method == "json_mode":
                fmt = {"kwargs": {"method": method}, "schema": schema}
            llm = self.bind(response_format=response_format, ls_structured_output_format=fmt)
            parser = PydanticOutputParser(pydantic_object=schema) if pydantic else JsonOutputParser()
        else:
            raise ValueError(f"method must be 'json_schema', 'function_calling' or 'json_mode', got {method!r}")
        if not include_raw:
            return llm | parser
        with_parsed = RunnablePassthrough.assign(parsed=itemgetter("raw") | parser, parsing_error=lambda _: None)
        without = RunnablePassthrough.assign(parsed=lambda _: None)
        return RunnableMap(raw=llm) | with_parsed.with_fallbacks([without], exception_key="parsing_error")
