"""Build a tiny Llama-style model locally, with no hub access, for the real CPU sweep.

Run with the vLLM virtual environment's Python (it has torch, transformers, tokenizers):

    python build_tiny_model.py OUTPUT_DIR

- Tokenizer: a byte-level BPE (vocabulary 4096) trained on the Python standard library's own
  ``.py`` files, so nothing is downloaded.
- Model: ``LlamaForCausalLM`` with hidden size 256, 2 layers, 4 heads of 64, bf16, untied
  embeddings; weights drawn with std 0.02 from a fixed seed (about 7 MB of safetensors).

Why random weights and not ``--load-format dummy``: greedy decoding of this random model is
semi-repetitive, so n-gram speculation gets a real acceptance that falls as K grows (about
84 % at K=1 down to 60 % at K=5), while vLLM's dummy weights collapse to one repeated n-gram
(100 % acceptance), which would make every K look free.
"""

from __future__ import annotations

import json
import sys
import sysconfig
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

VOCAB_SIZE = 4096
SEED = 0
#: Longest sequence the model (and its tokenizer) accepts; the context sweep builds it with 4096.
MAX_POSITIONS = 2048
#: Enough text for a stable 4096-token BPE; the first files in sorted order, so reruns match.
CORPUS_BYTES = 8_000_000
SPECIALS = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}


def corpus_files() -> list[Path]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    chosen, total = [], 0
    for path in sorted(stdlib.rglob("*.py")):
        if "site-packages" in path.parts or not path.is_file():
            continue
        chosen.append(path)
        total += path.stat().st_size
        if total >= CORPUS_BYTES:
            break
    return chosen


def build_tokenizer(output: Path) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE(unk_token=SPECIALS["unk_token"]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIALS.values()),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train([str(path) for path in corpus_files()], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, **SPECIALS)
    fast.model_max_length = MAX_POSITIONS
    fast.save_pretrained(output)
    return fast


def build_model(output: Path, tokenizer: PreTrainedTokenizerFast) -> None:
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=64,
        max_position_embeddings=MAX_POSITIONS,
        initializer_range=0.02,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(output, safe_serialization=True)
    model.generation_config.save_pretrained(output)


def main() -> int:
    global MAX_POSITIONS
    if len(sys.argv) not in (2, 3):
        print("usage: build_tiny_model.py OUTPUT_DIR [MAX_POSITIONS]", file=sys.stderr)
        return 2
    output = Path(sys.argv[1])
    if len(sys.argv) == 3:
        # Positions are rotary: only the config changes, the weights are the same.
        MAX_POSITIONS = int(sys.argv[2])
    output.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(output)
    build_model(output, tokenizer)
    config = json.loads((output / "config.json").read_text())
    print(f"built {config['architectures'][0]} in {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
