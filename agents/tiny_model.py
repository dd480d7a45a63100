"""A tiny, randomly initialised Qwen3-architecture model with a locally trained tokenizer.

Tests, demos and CPU benchmarks need a real causal LM and a real chat template without any hub
download. :func:`build_tiny_model` trains a byte-level BPE tokenizer on a few kilobytes of text
(so every string encodes, no unknown tokens), gives it Qwen's ChatML template and special tokens
(``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>``), and saves it beside a Qwen3 model of a few
hundred thousand parameters (head_dim 32, so vLLM can load it as well). The result is an ordinary
``save_pretrained`` directory: ``AutoTokenizer`` / ``AutoModelForCausalLM`` load it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CHATML_TEMPLATE", "TinyModelSpec", "build_tiny_model"]

# Qwen2.5 / Qwen3 ChatML, without tools or thinking blocks.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

_CORPUS = """
You are an agent in a text environment. Think step by step, then give the action.
Think: I need to craft the goal. Action: [[ get 1 oak logs ]]
Think: I have the ingredients. Action: [[ craft 4 oak planks using 1 oak logs ]]
Crafting commands: craft 4 stick using 2 planks. Goal: craft stick. Inventory: [oak planks] (4)
Got 1 oak logs. Crafted 4 minecraft:oak_planks. Could not find enough items to craft.
Your goal: go to the red ball. There is a red ball 1 2 steps in front of you.
Available actions: turn left, turn right, move forward, go to, pickup, drop, toggle.
You are in the middle of a room. Your task is to: put a clean mug in coffeemachine.
go to countertop 1, take mug 1 from countertop 1, clean mug 1 with sinkbasin 1.
search[red shoes] click[buy now] up down left right # _ O X P S
0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ .,:;!?'"()[]{}<>-_/\\|@#$%^&*+=~`
"""


@dataclass(frozen=True)
class TinyModelSpec:
    """Shape of the tiny model (defaults: ~0.5M parameters, head_dim 32)."""

    vocab_size: int = 512
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    head_dim: int = 32
    max_position_embeddings: int = 8192
    seed: int = 0


def _train_tokenizer(
    vocab_size: int,
    corpus: Sequence[str],
    added_tokens: Sequence[str],
    added_words: Sequence[str] = (),
):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    if added_tokens:
        tok.add_tokens([AddedToken(t, single_word=False, normalized=False) for t in added_tokens])
    if added_words:  # whole words only: "stone" is not cut out of "cobblestone"
        tok.add_tokens([AddedToken(w, single_word=True, normalized=False) for w in added_words])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHATML_TEMPLATE
    fast.padding_side = "left"
    return fast


def build_tiny_model(
    out_dir: str | Path,
    spec: TinyModelSpec | None = None,
    *,
    corpus: Sequence[str] | None = None,
    added_tokens: Sequence[str] = (),
    added_words: Sequence[str] = (),
) -> Path:
    """Build (or reuse, if already complete) the tiny model and tokenizer in ``out_dir``.

    ``corpus`` is the text the BPE tokenizer is trained on (default: a few kilobytes covering
    every environment); each of ``added_tokens`` becomes one token (e.g. a long system prompt),
    and so does each of ``added_words`` where it stands as a whole word (e.g. an item name).
    """
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    spec = spec or TinyModelSpec()
    out = Path(out_dir)
    if (out / "config.json").exists() and (out / "tokenizer.json").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _train_tokenizer(
        spec.vocab_size,
        list(corpus) if corpus is not None else [_CORPUS] * 4,
        added_tokens,
        added_words,
    )
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(spec.seed)
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
