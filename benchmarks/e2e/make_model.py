"""Build the tiny Llama that the end-to-end check serves: random weights from transformers'
``LlamaConfig`` and a byte-level BPE tokenizer trained here on generated text. Nothing comes
from a model hub.

    benchmarks/e2e/.venv/bin/python benchmarks/e2e/make_model.py OUT_DIR [--dtype float32]

Sizes are chosen so that the weights (~80 MB in fp32) are larger than this CPU's last-level
cache (32 MiB): a decode step then streams them from memory, as a GPU streams from HBM. The
folder is reused when its ``spec.json`` matches what would be built.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

SPEC = {
    "vocab_size": 4096,
    "hidden_size": 512,
    "intermediate_size": 1536,
    "num_hidden_layers": 6,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
    "seed": 0,
}
SPECIAL = ["<s>", "</s>", "<unk>"]


def corpus_lines(n_lines: int, seed: int) -> list[str]:
    """Pseudo-words from a fixed syllable set, so that BPE has many merges to learn."""
    rng = random.Random(seed)
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(6000)]
    punct = [".", ",", ";", "?", "!", ""]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(5, 20))) + rng.choice(punct) for _ in range(n_lines)]


def build(out: Path, dtype: str) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    spec = {**SPEC, "dtype": dtype}
    stamp = out / "spec.json"
    if stamp.is_file() and json.loads(stamp.read_text()) == spec:
        print(f"model: {out} is complete, reused")
        return
    out.mkdir(parents=True, exist_ok=True)

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec["vocab_size"],
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus_lines(40000, spec["seed"]), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(out)
    vocab = tok.get_vocab_size()
    if vocab != spec["vocab_size"]:
        sys.exit(f"model: the tokenizer learned {vocab} tokens, not {spec['vocab_size']}; enlarge the corpus")

    torch.manual_seed(spec["seed"])
    keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "max_position_embeddings", "tie_word_embeddings")  # fmt: skip
    config = LlamaConfig(
        **{k: spec[k] for k in keys},
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        dtype=dtype,
    )
    model = LlamaForCausalLM(config).to(getattr(torch, dtype))
    model.save_pretrained(out, safe_serialization=True)
    params = sum(p.numel() for p in model.parameters())
    stamp.write_text(json.dumps(spec, indent=2) + "\n")
    print(f"model: {out}: Llama, {params / 1e6:.1f} M parameters, {dtype}, vocab {vocab}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = ap.parse_args()
    build(args.out, args.dtype)


if __name__ == "__main__":
    main()
