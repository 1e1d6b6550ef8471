"""LangChain for sllm: ChatSLLM runs the engine in process; sllm_chat_openai points LangChain's
ChatOpenAI at a running server; SLLMText2SQL asks the server's text-to-SQL endpoint."""

from integrations.langchain.chat_model import ChatSLLM
from integrations.langchain.engines import shared_engine, shutdown_engines
from integrations.langchain.openai_client import sllm_chat_openai
from integrations.langchain.text2sql_tool import SLLMText2SQL

__all__ = ["ChatSLLM", "SLLMText2SQL", "shared_engine", "shutdown_engines", "sllm_chat_openai"]
