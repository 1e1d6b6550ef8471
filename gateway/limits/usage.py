"""Token usage of a finished request, summed over its prompts."""

from engine import RequestOutput
from gateway.protocol.common import PromptTokensDetails, UsageInfo


def usage_of(finals: list[RequestOutput]) -> UsageInfo:
    prompt = sum(len(f.prompt_token_ids) for f in finals)
    completion = sum(f.num_output_tokens for f in finals)
    cached = sum(f.metrics.cached_tokens for f in finals)
    return UsageInfo(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion,
                     prompt_tokens_details=PromptTokensDetails(cached_tokens=cached))
