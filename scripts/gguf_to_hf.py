"""Convert a GGUF generator (default: the packaged SmolLM2-135M-Instruct) into a plain HF folder (bf16 safetensors).

vLLM cannot read this GGUF; transformers can. The GGUF is dequantised by transformers, its weights are copied into a
fresh ``AutoModelForCausalLM.from_config(cfg)`` and saved in bf16 with the tokenizer. Idempotent: a folder whose
stamp matches the source file is left as it is. Run with prag's main venv:

    .venv/bin/python scripts/gguf_to_hf.py --out .prag/models/SmolLM2-135M-Instruct-hf
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

STAMP = "prag-gguf-source.json"


def _default_out() -> Path:
    """$PRAG_HOME/models/SmolLM2-135M-Instruct-hf (PRAG_HOME defaults to <repo>/.prag)."""
    home = os.environ.get("PRAG_HOME") or str(Path(__file__).resolve().parent.parent / ".prag")
    return Path(home) / "models" / "SmolLM2-135M-Instruct-hf"


def _source_id(gguf: Path) -> dict[str, object]:
    """What identifies the converted source: file name, size and modification time."""
    st = gguf.stat()
    return {"gguf": str(gguf.resolve()), "size": st.st_size, "mtime": int(st.st_mtime)}


def convert(gguf: Path, out: Path, force: bool = False) -> bool:
    """Write the HF folder for gguf into out; return False when an up-to-date conversion was already there."""
    stamp = out / STAMP
    source = _source_id(gguf)
    if not force and stamp.is_file() and json.loads(stamp.read_text()) == source and (out / "config.json").is_file():
        return False
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.utils.logging.disable_progress_bar()
    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    config.dtype = torch.bfloat16
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict(), strict=True)
    fresh.tie_weights()
    fresh = fresh.to(torch.bfloat16).eval()
    out.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    fresh.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    _make_portable(out)
    stamp.write_text(json.dumps(source))
    return True


def _edit_json(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Apply edit to a JSON file in place."""
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _make_portable(out: Path) -> None:
    """Make the folder readable by other loaders (vLLM, older transformers): a plain model, no GGUF traces."""

    def fix_config(cfg: dict[str, Any]) -> None:
        cfg.pop("quantization_config", None)
        cfg.pop("_model_name_or_path", None)
        rope = cfg.get("rope_parameters") or {}
        if "rope_theta" in rope:
            cfg.setdefault("rope_theta", rope["rope_theta"])

    def fix_tokenizer(tok: dict[str, Any]) -> None:
        tok["tokenizer_class"] = "PreTrainedTokenizerFast"
        tok["model_max_length"] = max_len
        for key in ("is_local", "local_files_only"):
            tok.pop(key, None)
        template = out / "chat_template.jinja"
        if template.is_file():
            tok.setdefault("chat_template", template.read_text(encoding="utf-8"))

    max_len = int(json.loads((out / "config.json").read_text()).get("max_position_embeddings", 2048))
    _edit_json(out / "config.json", fix_config)
    _edit_json(out / "tokenizer_config.json", fix_tokenizer)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, default=None, help="GGUF file (default: the packaged SmolLM2)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: $PRAG_HOME/models/...)")
    parser.add_argument("--force", action="store_true", help="convert even when an up-to-date folder exists")
    args = parser.parse_args(argv)
    if args.gguf is None:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from prag_models.llm.packaged import packaged_gguf_path

        args.gguf = packaged_gguf_path()
    out = args.out or _default_out()
    start = time.perf_counter()
    done = convert(args.gguf, out, force=args.force)
    verb = "converted" if done else "up to date:"
    print(f"[gguf_to_hf] {verb} {args.gguf.name} -> {out} ({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
