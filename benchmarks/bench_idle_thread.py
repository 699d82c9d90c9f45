"""Training steps while another thread of the process holds an OpenMP team.

torch's CPU wheels run their parallel regions on GNU OpenMP (libgomp), which gives
every thread that starts one a team of its own, alive as long as that thread is.
When a process holds more OpenMP threads than the machine has cores, libgomp cuts
how long its idle workers spin before they sleep, so every parallel region of the
busy thread waits on a futex wake-up. The loop's decoding thread
(``engine=hf_batched``) is such a thread: it keeps its team while idle, and the
training phase that follows collection ran 1.4-1.8x slower than the same training
in a fresh process (docs/results.md). ``agentq.loop.improve`` therefore closes the
engine before it trains.

Measured here, interleaved within each repeat (medians reported): a training step
(forward and backward of ``--tokens`` tokens, bf16 autocast where the CPU has
native bf16, as ``trainer.lightning.precision=auto`` chooses), or with
``--work decode`` a shared decode step (``--rows`` next tokens over a
``--tokens``-long cache, fp32, as the engine decodes), in the main thread

- alone (no other thread has run torch),
- while an idle thread that ran one forward (the engine between requests) is alive,
- while such a thread is alive but has given its team back
  (``agentq.models.openmp.release_openmp_team``, what a thread handing work to
  the engine does),
- after that thread has been joined (what closing the engine does).

    python -m benchmarks.bench_idle_thread                # embedded SmolLM2-135M
    python -m benchmarks.bench_idle_thread --work decode --tokens 600 --steps 20 --repeats 5
    python -m benchmarks.bench_idle_thread --model tiny   # random tiny model: a smoke test
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from agentq.models.openmp import release_openmp_team
from benchmarks.common import add_model_argument, cli, load_model

STATES = ("alone", "idle thread alive", "idle thread alive, team given back", "idle thread joined")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_argument(parser)
    parser.add_argument("--work", choices=("train", "decode"), default="train", help="what the busy thread does")
    parser.add_argument("--tokens", type=int, default=256, help="tokens per training step; the cache's length when decoding")
    parser.add_argument("--rows", type=int, default=8, help="rows of a decode step (concurrent searches)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per state and repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    return parser.parse_args(argv)


class IdleThread:
    """A thread that ran one forward (so holds an OpenMP team; with ``give_back`` it then
    ends the team), then waits to be joined."""

    def __init__(self, model, ids: torch.Tensor, give_back: bool = False) -> None:
        self._release = threading.Event()
        ran = threading.Event()
        gave_back: list[bool] = []

        def body() -> None:
            with torch.no_grad():
                model(input_ids=ids)
            gave_back.append(give_back and release_openmp_team())
            ran.set()
            self._release.wait()

        self._thread = threading.Thread(target=body, name="idle engine", daemon=True)
        self._thread.start()
        ran.wait()
        if give_back and not gave_back[0]:
            self.join()
            raise RuntimeError("torch does not run on libgomp here: no team to give back")

    def join(self) -> None:
        self._release.set()
        self._thread.join()


def train_step(model, ids: torch.Tensor, bf16: bool):
    """One training step on ``ids`` (forward and backward)."""
    model.train()

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        model.zero_grad(set_to_none=True)

    return step


def decode_step(model, ids: torch.Tensor, rows: int):
    """One shared decode step: ``rows`` next tokens over a cache of ``ids`` (fp32, no grad),
    the cache cut back after each so every step sees the same length."""
    model.eval()
    with torch.no_grad():
        cache = model(input_ids=ids.expand(rows, -1), use_cache=True).past_key_values
    next_ids = ids[:, -1:].expand(rows, -1)

    @torch.no_grad()
    def step() -> None:
        model(input_ids=next_ids, past_key_values=cache, use_cache=True)
        cache.crop(-1)

    return step


def run(args: argparse.Namespace) -> dict:
    from agentq.models.loading import native_bf16

    model, _ = load_model(args.model)
    ids = torch.randint(0, model.config.vocab_size, (1, args.tokens))
    bf16 = native_bf16("cpu") and args.work == "train"
    step = train_step(model, ids, bf16) if args.work == "train" else decode_step(model, ids, args.rows)

    def timed() -> float:
        started = time.perf_counter()
        for _ in range(args.steps):
            step()
        return (time.perf_counter() - started) / args.steps

    step()  # warm-up: the kernels' first call
    seconds: dict[str, list[float]] = {state: [] for state in STATES}
    for _ in range(args.repeats):
        seconds["alone"].append(timed())
        idle = IdleThread(model, ids)
        seconds["idle thread alive"].append(timed())
        idle.join()
        idle = IdleThread(model, ids, give_back=True)
        seconds["idle thread alive, team given back"].append(timed())
        idle.join()
        seconds["idle thread joined"].append(timed())
        # From the second repeat on, "alone" follows a joined thread too: the same state.
    medians = {state: statistics.median(values) for state, values in seconds.items()}
    return {
        "model": args.model, "work": args.work, "rows": args.rows, "tokens": args.tokens, "bf16_autocast": bf16, "threads": torch.get_num_threads(),
        "seconds_per_step": medians,
        "over_alone": {state: medians[state] / medians["alone"] for state in STATES[1:]},
    }  # fmt: skip


def report(r: dict) -> str:
    lines = [
        (f"training step, {r['tokens']} tokens" if r["work"] == "train" else f"decode step, {r['rows']} rows, {r['tokens']}-token cache")
        + f", {r['model']}, bf16 autocast {r['bf16_autocast']}, "
        f"{r['threads']} torch threads:"
    ]
    lines += [f"  {state:<35} {r['seconds_per_step'][state]:.4f} s" for state in STATES]
    lines.append("  over alone: " + ", ".join(f"{state} {ratio:.2f}x" for state, ratio in r["over_alone"].items()))
    return "\n".join(lines)


def main() -> dict:
    return cli(parse_args, run, report)


if __name__ == "__main__":
    main()
