"""What the model benchmarks share: the --model argument, loading it, the command-line entry."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any


def add_model_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default="embedded",
        help="'embedded' (SmolLM2-135M from the bundled GGUF), 'tiny', or a local HF model path",
    )


def load_model(name: str, dtype: str = "float32"):
    """(model, tokenizer): 'embedded', 'tiny' or a local Hugging Face folder, in ``dtype``."""
    from agentq.models import EmbeddedSmolLM2, HFModel, TinyRandomModel

    if name == "embedded":
        return EmbeddedSmolLM2(dtype=dtype).load()
    if name == "tiny":
        return TinyRandomModel(dtype=dtype).load()
    return HFModel(name, dtype=dtype).load()


def cli(
    parse_args: Callable[[], argparse.Namespace],
    run: Callable[[argparse.Namespace], dict[str, Any]],
    report: Callable[[dict[str, Any]], str],
) -> dict[str, Any]:
    """Run, write the figures to ``--json`` if given, print the report; returns the figures."""
    args = parse_args()
    results = run(args)
    if getattr(args, "json", None) is not None:
        args.json.write_text(json.dumps(results, indent=1))
    print(report(results))
    return results
