# SPDX-License-Identifier: Apache-2.0
"""A GGUF causal LM dequantized into a Hugging Face bf16 safetensors
directory (config, weights, tokenizer, chat template, generation config),
with transformers 4.x or 5.x.

transformers' ``from_pretrained(gguf_file=...)`` keeps 5.x's weights
quantized and ``save_pretrained`` then refuses; building the model from the
GGUF's config and loading the dequantized tensors works in both.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def convert_gguf_to_hf(
    gguf_file: Path, out: Path, log: Callable[[str], None] = print
) -> None:
    import torch
    from transformers import AutoConfig, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    name = gguf_file.name
    src = str(gguf_file.parent)
    t = time.time()
    config = AutoConfig.from_pretrained(src, gguf_file=name)
    model = _model_from_config(config, torch.float32)
    log(f"  convert: config and fp32 model built ({time.time() - t:.1f} s)")

    t = time.time()
    tensors = load_gguf_checkpoint(
        str(gguf_file), return_tensors=True, model_to_load=model
    )["tensors"]
    result = model.load_state_dict(tensors, strict=False)
    # Nothing may be left out or left over, except an output projection tied
    # to the embedding (GGUF stores it once).
    tied = (
        {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    )
    missing, unexpected = set(result.missing_keys), set(result.unexpected_keys)
    if missing != tied or unexpected:
        raise ValueError(
            f"GGUF tensors do not match the model: missing {sorted(missing - tied)}, "
            f"unexpected {sorted(unexpected)}"
        )
    model.tie_weights()
    if tied and (
        model.get_output_embeddings().weight.data_ptr()
        != model.get_input_embeddings().weight.data_ptr()
    ):
        raise ValueError("lm_head is not tied to the embedding after tie_weights()")
    log(
        f"  convert: {len(tensors)} tensors dequantized and loaded "
        f"({time.time() - t:.1f} s)"
    )

    t = time.time()
    model.to(torch.bfloat16)  # save_pretrained records the dtype in the config
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer = _tokenizer_as_declared(
        AutoTokenizer.from_pretrained(src, gguf_file=name), gguf_file
    )
    if not tokenizer.chat_template:
        raise ValueError(f"{name} has no chat template")
    tokenizer.save_pretrained(str(out))
    log(f"  convert: bf16 safetensors and tokenizer saved ({time.time() - t:.1f} s)")


def _model_from_config(config: Any, dtype: Any) -> Any:
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_config(config, dtype=dtype)
    except TypeError:  # transformers < 4.56 names it torch_dtype
        return AutoModelForCausalLM.from_config(config, torch_dtype=dtype)


def _tokenizer_as_declared(tokenizer: Any, gguf_file: Path) -> Any:
    """The tokenizer as the GGUF declares it. transformers' own reading of a
    Llama GGUF's byte-level BPE vocabulary differs between releases: 4.57
    wraps it in its Llama class (BOS prepended whatever the GGUF says, BOS
    as EOS, a SentencePiece decoder), 5.17 takes BOS as EOS as well, 5.19
    gets it right. The vocabulary and merges (the same in all of them) are
    kept; special tokens, BOS/EOS insertion and the decoder come from the
    GGUF's metadata. Other vocabularies are kept as transformers read them."""
    from gguf import GGUFReader
    from tokenizers import Tokenizer, decoders, processors
    from transformers import PreTrainedTokenizerFast

    fields = GGUFReader(str(gguf_file)).fields

    def declared(key: str, default: Any = None) -> Any:
        field = fields.get(f"tokenizer.ggml.{key}")
        return field.contents() if field is not None else default

    if declared("model") != "gpt2":
        return tokenizer
    backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    backend.decoder = decoders.ByteLevel()

    def token(key: str) -> str | None:
        token_id = declared(f"{key}_token_id")
        return None if token_id is None else backend.id_to_token(int(token_id))

    bos, eos = token("bos"), token("eos")
    single = ["$A:0"]
    if declared("add_bos_token", False) and bos is not None:
        single.insert(0, f"{bos}:0")
    if declared("add_eos_token", False) and eos is not None:
        single.append(f"{eos}:0")
    pair = single + [s.replace("$A", "$B").replace(":0", ":1") for s in single]
    specials = [
        (t, backend.token_to_id(t)) for t in (bos, eos) if t and f"{t}:0" in single
    ]
    backend.post_processor = processors.TemplateProcessing(
        single=" ".join(single), pair=" ".join(pair), special_tokens=specials
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=bos,
        eos_token=eos,
        unk_token=token("unknown"),
        pad_token=token("padding"),
        chat_template=declared("chat_template") or tokenizer.chat_template,
        model_max_length=_context_length(fields) or tokenizer.model_max_length,
        clean_up_tokenization_spaces=False,
        # A causal LM takes no token_type_ids (4.x's default would add them).
        model_input_names=["input_ids", "attention_mask"],
    )


def _context_length(fields: Any) -> int | None:
    arch = fields.get("general.architecture")
    if arch is None:
        return None
    field = fields.get(f"{arch.contents()}.context_length")
    return int(field.contents()) if field is not None else None
