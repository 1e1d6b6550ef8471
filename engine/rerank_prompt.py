"""The prompt of a decoder reranker of the Qwen3-Reranker kind: a chat turn asking whether the document
meets the query, whose answer is read, not generated: the last prompt token's logits at "no" and "yes",
softmaxed, and the "yes" probability is the score (engine/pooling.py `classify_token_ids`).

As the Qwen3-Reranker model card builds it: the system prefix, `<Instruct>: ...\\n<Query>: ...\\n<Document>: ...`
and the assistant suffix with an empty think block, each tokenized on its own and joined; the pair is
truncated so the whole prompt fits `max_length`."""

from dataclasses import dataclass

PREFIX = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
          "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n")
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"


@dataclass(frozen=True)
class RerankPrompt:
    prefix_ids: list[int]
    suffix_ids: list[int]
    no_id: int
    yes_id: int

    @classmethod
    def for_tokenizer(cls, tokenizer) -> "RerankPrompt":
        no, yes = tokenizer.convert_tokens_to_ids("no"), tokenizer.convert_tokens_to_ids("yes")
        if no is None or yes is None or no == tokenizer.unk_token_id or yes == tokenizer.unk_token_id:
            raise ValueError("a reranker's tokenizer needs the tokens 'yes' and 'no'")
        return cls(tokenizer.encode(PREFIX, add_special_tokens=False),
                   tokenizer.encode(SUFFIX, add_special_tokens=False), no, yes)

    @property
    def label_ids(self) -> tuple[int, int]:
        """(no, yes): the softmax's second value is the score."""
        return self.no_id, self.yes_id

    def prompt_ids(self, tokenizer, query: str, document: str, max_length: int,
                   instruction: str | None = None) -> list[int]:
        pair = f"<Instruct>: {instruction or DEFAULT_INSTRUCTION}\n<Query>: {query}\n<Document>: {document}"
        room = max_length - len(self.prefix_ids) - len(self.suffix_ids)
        ids = tokenizer.encode(pair, add_special_tokens=False)[: max(room, 1)]
        return self.prefix_ids + ids + self.suffix_ids
