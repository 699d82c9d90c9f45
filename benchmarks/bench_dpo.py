"""One step-DPO optimiser step: ours against TRL 1.16's ``DPOTrainer``, on the same pairs.

Both sides train a fresh LoRA adapter (conf/trainer/cpu.yaml: r 8 on q/k/v/o,
AdamW lr 2e-4, no weight decay, gradient clip 1.0; DPO beta from
conf/objective/dpo.yaml) on WebShop-like step pairs: the agent's real
first-step prompt of a WebShop goal (system message, four demonstrations, the
search page: ~1,000 tokens, chat-templated) and two composite actions the
model sampled for it (temperature 0.7, ``--completion-tokens`` each). Each side
gets its own fresh model object, in fp32, without gradient checkpointing.

- (a) ours: ``PreferenceModule.training_step`` with ``shared_prefix=True`` (the
  history runs once and both actions from its KV cache, LM head on action
  tokens only) and ``use_logged_reference=True`` (reference log-probs from the
  batch, no reference forward), then ``backward``, clip, ``AdamW.step``,
  ``zero_grad``: what Lightning's automatic optimisation runs per step,
  without Lightning's loop around it.
- (b) TRL: ``DPOTrainer.train()``'s own loop, ``loss_type=["sigmoid"]``,
  ``precompute_ref_log_probs=True``: TRL runs the reference forward (adapter
  disabled) over the whole dataset once in ``__init__``, stores
  ``ref_chosen_logps``/``ref_rejected_logps`` as dataset columns, and its
  training steps read them from the batch; we then replace those columns with
  our reference log-probs, so neither side runs a reference forward while
  timed and both use the same numbers. A step is timed from TRL's
  ``on_step_begin`` to its ``on_step_end`` callback: forward of the
  [chosen; rejected] rows (prompt + completion each, right-padded), its fused
  chunked log-prob head, backward, clip, optimiser and scheduler step. On CPU
  that head projects every position through the 49k-token LM head (it scores
  only label positions on Triton devices). ``bf16=False``: TRL's configs
  default to bf16 autocast even on CPU; ours trains in fp32.
- (c) ours with ``shared_prefix=False`` (``--no-unshared`` skips it): the two
  rows [prompt, chosen] and [prompt, rejected] scored separately.

The steps interleave (TRL, then ours, then (c), inside TRL's ``on_step_end``)
so a busy neighbour slows all of them alike; step 1 of each side is warm-up
and the agreement check: both sides start from identical weights (our adapter
copied into TRL's, with lora_B drawn from N(0, ``--lora-b-std``) instead of
zeros so the policy differs from the reference and the loss is not the
trivial log 2) and the same reference log-probs, and we compare their step-1
losses and summed log-probs. Tokens are TRL's own tokenization of the
conversational pairs (the completion ends ``<|im_end|>\\n``); ours scores the
same ids. The reference log-probs are the base model's on those ids (what
sampling logs for the tokens it drew), computed once before any step.

    python -m benchmarks.bench_dpo                     # embedded SmolLM2-135M, batch sizes 1 and 2
    python -m benchmarks.bench_dpo --model tiny        # random tiny model: a smoke test
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from agentq.records.history import Messages
from benchmarks.common import add_model_argument, cli, load_model

REPO = Path(__file__).resolve().parents[1]
EXPERIMENT = "webshop_mcts_dpo"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_argument(parser)
    parser.add_argument("--batch-sizes", default="1,2", help="pairs per optimiser step, comma-separated")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per side (after one warm-up step)")
    parser.add_argument("--completion-tokens", type=int, default=40, help="sampled tokens per action")
    parser.add_argument("--lora-b-std", type=float, default=0.01, help="std of the shared lora_B init")
    parser.add_argument("--no-unshared", action="store_true", help="skip (c), ours with shared_prefix=false")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    return parser.parse_args(argv)


# --------------------------------------------------------------------- realistic inputs


def compose(*overrides: str) -> DictConfig:
    """The run config of ``+experiment=webshop_mcts_dpo`` (plus overrides), as run.py composes it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return hydra_compose(
            "config", overrides=[f"+experiment={EXPERIMENT}", "paths.run_dir=unused", *overrides]
        )


def webshop_prompts(count: int, depths: Sequence[int] = (0,), *, first_task: int = 0) -> list[Messages]:
    """The agent's prompts h_t on WebShop train goals, as the configured policy renders them.

    Depth 0 is a goal's search page (~1,000 tokens with the four
    demonstrations), depth 1 its results page after searching the instruction
    (~1,600), depth 2 the first result's item page (~1,250). Earlier actions
    are written in the demonstrations' composite format. Prompts cycle over
    ``depths`` goal by goal, ``count`` in all.
    """
    from hydra.utils import instantiate

    from agentq.agent import episode

    cfg = compose()
    env = instantiate(cfg.env.make)
    render = instantiate(cfg.agent.prompt)
    base = env.unwrapped
    tasks = base.task_ids("train")
    prompts: list[Messages] = []
    try:
        for i in range(count):
            task_id, depth = tasks[first_task + i], depths[i % len(depths)]
            history = episode.start(env, task_id)
            if depth >= 1:
                query = base.engine.goals[task_id].instruction_text
                action = (
                    "PLAN:\n1. search for the product\n2. open a matching product, select the options, "
                    "buy it\nTHOUGHT: I am on the search page, so I search with the key words.\n"
                    f"COMMAND: search[{query}]\nEXPLANATION: The results will list matching products.\n"
                    "STATUS: CONTINUE"
                )
                history = episode.step(env, history, action, f"search[{query}]")[0]
            if depth >= 2:
                click = next(a for a in history.valid_actions if a.startswith("click[B0"))
                action = (
                    "THOUGHT: The first result matches the instruction.\n"
                    f"COMMAND: {click}\nEXPLANATION: Open the product page to choose the options.\n"
                    "STATUS: CONTINUE"
                )
                history = episode.step(env, history, action, click)[0]
            prompts.append(render(history))
    finally:
        env.close()
    return prompts


@dataclass(frozen=True)
class TextPair:
    """A step pair: the history's messages and two sampled composite actions, as text and as sampled ids."""

    prompt: Messages
    chosen: str
    rejected: str
    chosen_ids: tuple[int, ...]
    rejected_ids: tuple[int, ...]


def sample_pairs(model, tokenizer, prompts: Sequence[Messages], tokens: int, seed: int) -> list[TextPair]:
    """Two distinct composite actions per prompt from the model itself, as MCTS expansion samples them."""
    from agentq.agent.policy import encode_chat, eos_token_ids
    from agentq.models import sample_k

    generator = torch.Generator().manual_seed(seed)
    pairs = []
    for messages in prompts:
        ids = encode_chat(tokenizer, messages, max_tokens=4096)
        for _ in range(10):  # identical draws are rare; a pair needs two different actions
            a, b = sample_k(
                model, ids, 2, tokenizer=tokenizer, max_new_tokens=tokens, temperature=0.7,
                eos_token_ids=eos_token_ids(tokenizer), generator=generator,
            )  # fmt: skip
            if a.text.strip() and b.text.strip() and a.text != b.text:
                break
        else:
            raise RuntimeError("sample_pairs: ten draws gave no two different non-empty actions")
        pairs.append(TextPair(messages, a.text, b.text, a.token_ids, b.token_ids))
    return pairs


# --------------------------------------------------------------------- the two sides


@dataclass
class OurSide:
    """A PreferenceModule on a fresh model with its optimiser, stepped by hand."""

    module: Any
    optimizer: torch.optim.Optimizer
    clip: float

    def step(self, batch) -> float:
        loss = self.module.training_step(batch, 0)
        loss.backward()
        params = [p for p in self.module.parameters() if p.requires_grad]
        torch.nn.utils.clip_grad_norm_(params, self.clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())


def our_side(cfg: DictConfig, model, *, shared_prefix: bool, batch_size: int, seed: int) -> OurSide:
    """What ``agentq.training.fit`` builds for step pairs: a fresh adapter, the module, its optimiser."""
    from hydra.utils import instantiate
    from peft import get_peft_model

    from agentq.training.module import PreferenceModule

    torch.manual_seed(seed)  # LoRA A init, as fit seeds it
    peft_model = get_peft_model(model, instantiate(cfg.trainer.lora, _convert_="all"))
    peft_model.train()
    module = PreferenceModule(
        peft_model,
        instantiate(cfg.objective),
        instantiate(cfg.trainer.optimizer),
        use_logged_reference=True,
        shared_prefix=shared_prefix,
        rows_per_forward=2 * batch_size,
    )
    return OurSide(module, module.configure_optimizers(), float(cfg.trainer.lightning.gradient_clip_val))


def trl_trainer(cfg: DictConfig, model, tokenizer, pairs: Sequence[TextPair], *, batch_size: int, out_dir: Path, seed: int):
    """TRL's DPOTrainer with the same LoRA, optimiser and loss, reference log-probs precomputed."""
    from datasets import Dataset
    from hydra.utils import instantiate
    from transformers import PrinterCallback, ProgressCallback
    from trl import DPOConfig, DPOTrainer

    dataset = Dataset.from_dict(
        {
            "prompt": [p.prompt for p in pairs],
            "chosen": [[{"role": "assistant", "content": p.chosen}] for p in pairs],
            "rejected": [[{"role": "assistant", "content": p.rejected}] for p in pairs],
        }
    )
    optimizer = cfg.trainer.optimizer
    args = DPOConfig(
        output_dir=str(out_dir),
        report_to="none",
        use_cpu=True,
        bf16=False,  # TRL defaults to bf16 autocast even on CPU; ours trains in fp32
        activation_checkpointing=False,  # TRL's default is on; ours is off (conf/trainer/cpu.yaml)
        seed=seed,
        beta=float(cfg.objective.beta),
        loss_type=["sigmoid"],
        max_length=None,  # nothing truncated: both sides score the whole prompt
        precompute_ref_log_probs=True,
        per_device_train_batch_size=batch_size,
        max_steps=len(pairs) // batch_size,
        learning_rate=float(optimizer.lr),
        weight_decay=float(optimizer.weight_decay),
        optim="adamw_torch",  # torch.optim.AdamW, as conf/trainer/cpu.yaml
        lr_scheduler_type="constant",  # Lightning runs no scheduler here
        max_grad_norm=float(cfg.trainer.lightning.gradient_clip_val),
        train_sampling_strategy="sequential",  # our side replays the same batches in order
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = DPOTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=instantiate(cfg.trainer.lora, _convert_="all"),
    )
    for callback in (PrinterCallback, ProgressCallback):  # one dict per step on stdout otherwise
        trainer.remove_callback(callback)
    return trainer


# --------------------------------------------------------------------- the benchmark


def reference_logps(model, ids: Sequence[tuple[list[int], list[int], list[int]]]) -> tuple[list[float], list[float]]:
    """Summed log pi of each pair's chosen and rejected ids under ``model`` (the logged reference)."""
    from agentq.models import completion_logprobs, pad_pairs

    chosen, rejected = [], []
    with torch.no_grad():
        for prompt, c, r in ids:
            logps = completion_logprobs(model, *pad_pairs([prompt, prompt], [c, r], pad_id=0))  # (2,)
            chosen.append(float(logps[0]))
            rejected.append(float(logps[1]))
    return chosen, rejected


def draw_lora_b(model, std: float, seed: int) -> None:
    """lora_B from N(0, std) instead of zeros, so the policy differs from the reference."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * std)


def copy_adapter(source, target) -> None:
    """Every LoRA tensor of ``source`` into ``target`` (the same names under peft)."""
    mine = {n: p for n, p in source.named_parameters() if "lora_" in n}
    theirs = {n: p for n, p in target.named_parameters() if "lora_" in n}
    if mine.keys() != theirs.keys():
        raise RuntimeError(f"LoRA parameters differ: {sorted(mine.keys() ^ theirs.keys())[:4]}")
    with torch.no_grad():
        for name, param in mine.items():
            theirs[name].copy_(param)


def run_batch_size(args: argparse.Namespace, cfg: DictConfig, pairs: Sequence[TextPair], batch_size: int) -> dict[str, Any]:
    """Interleaved steps of TRL, ours and ours without the shared prefix, at one batch size."""
    from transformers import TrainerCallback

    from agentq.training.data import TokenizedPreference, collate_preferences

    steps = args.steps + 1  # the first is warm-up and the agreement check
    pairs = [pairs[i % len(pairs)] for i in range(steps * batch_size)]
    trl_model, tokenizer = load_model(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = trl_trainer(cfg, trl_model, tokenizer, pairs, batch_size=batch_size, out_dir=Path(tmp), seed=args.seed)
        data = trainer.train_dataset
        ids = list(zip(data["prompt_ids"], data["chosen_ids"], data["rejected_ids"], strict=True))

        base, _ = load_model(args.model)
        ref_chosen, ref_rejected = reference_logps(base, ids)
        trl_ref = list(zip(data["ref_chosen_logps"], data["ref_rejected_logps"], strict=True))
        ref_gap = max(
            max(abs(a - c), abs(b - r)) for (a, b), c, r in zip(trl_ref, ref_chosen, ref_rejected, strict=True)
        )
        # The same reference numbers on both sides: ours replace TRL's precomputed columns.
        data = data.remove_columns(["ref_chosen_logps", "ref_rejected_logps"])
        trainer.train_dataset = data.add_column("ref_chosen_logps", ref_chosen).add_column(
            "ref_rejected_logps", ref_rejected
        )

        items = [
            TokenizedPreference(chosen=[(p, c)], rejected=[(p, r)], chosen_logprob=rc, rejected_logprob=rr)
            for (p, c, r), rc, rr in zip(ids, ref_chosen, ref_rejected, strict=True)
        ]
        batches = [collate_preferences(items[i : i + batch_size]) for i in range(0, len(items), batch_size)]
        sides = {"ours": our_side(cfg, base, shared_prefix=True, batch_size=batch_size, seed=args.seed)}
        if not args.no_unshared:
            unshared, _ = load_model(args.model)
            sides["ours_unshared"] = our_side(cfg, unshared, shared_prefix=False, batch_size=batch_size, seed=args.seed)
        source = sides["ours"].module.model
        draw_lora_b(source, args.lora_b_std, args.seed)
        for target in [side.module.model for side in sides.values()][1:] + [trainer.model]:
            copy_adapter(source, target)  # identical weights on every side

        with torch.no_grad():  # step 1's log-probs, for the agreement check (untimed)
            first = sides["ours"].module.preference_logps(batches[0])

        times: dict[str, list[float]] = {"trl": [], **{name: [] for name in sides}}
        losses: dict[str, list[float]] = {name: [] for name in sides}

        class Interleave(TrainerCallback):
            """Time TRL's step between its own callbacks; then step each of ours once."""

            def on_step_begin(self, *_, **__):
                self.started = time.perf_counter()

            def on_step_end(self, _args, state, *__, **___):
                times["trl"].append(time.perf_counter() - self.started)
                batch = batches[state.global_step - 1]
                for name, side in sides.items():
                    started = time.perf_counter()
                    losses[name].append(side.step(batch))
                    times[name].append(time.perf_counter() - started)

        trainer.add_callback(Interleave())
        load_before = os.getloadavg()[0]
        with warnings.catch_warnings():
            # Our module logs through self.log, which has no Lightning trainer to write to here.
            warnings.filterwarnings("ignore", message=r".*`self\.log\(\)`.*trainer.*")
            trainer.train()
        load_after = os.getloadavg()[0]

    trl_logs = [row for row in trainer.state.log_history if "loss" in row and "logps/chosen" in row]
    trl_first = trl_logs[0]
    median = {name: statistics.median(t[1:]) for name, t in times.items()}
    return {
        "batch_size": batch_size,
        "timed_steps": steps - 1,
        "seconds": {name: t[1:] for name, t in times.items()},
        "median_s": median,
        "ratio_trl_over_ours": median["trl"] / median["ours"],
        "ratio_unshared_over_ours": median["ours_unshared"] / median["ours"] if "ours_unshared" in median else None,
        "prompt_tokens": sorted(len(p) for p, _, _ in ids),
        "completion_tokens": sorted(len(x) for _, c, r in ids for x in (c, r)),
        "loss_ours_step1": losses["ours"][0],
        "loss_trl_step1": trl_first["loss"],
        "loss_abs_diff": abs(losses["ours"][0] - trl_first["loss"]),
        "loss_unshared_step1": losses["ours_unshared"][0] if "ours_unshared" in losses else None,
        "margin_step1": float((first.policy_chosen - first.reference_chosen - first.policy_rejected + first.reference_rejected).mean()),
        "logps_step1": {
            "ours": [float(first.policy_chosen.mean()), float(first.policy_rejected.mean())],
            "trl": [trl_first["logps/chosen"], trl_first["logps/rejected"]],
        },
        "logps_chosen_rel_diff": abs(float(first.policy_chosen.mean()) - trl_first["logps/chosen"]) / abs(trl_first["logps/chosen"]),
        "logps_rejected_rel_diff": abs(float(first.policy_rejected.mean()) - trl_first["logps/rejected"]) / abs(trl_first["logps/rejected"]),
        "trl_precomputed_ref_max_abs_diff": ref_gap,
        "load_average": [load_before, load_after],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Sample the pairs once, then time each batch size; returns the figures (see :func:`report`)."""
    import transformers
    import trl

    if args.threads:
        torch.set_num_threads(args.threads)
    batch_sizes = [int(b) for b in str(args.batch_sizes).split(",")]
    cfg = compose()
    steps = args.steps + 1
    sampler, tokenizer = load_model(args.model)
    started = time.perf_counter()
    prompts = webshop_prompts(steps * max(batch_sizes))
    pairs = sample_pairs(sampler, tokenizer, prompts, args.completion_tokens, args.seed)
    prepare = time.perf_counter() - started
    del sampler
    results = {
        "model": args.model,
        "threads": torch.get_num_threads(),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__},
        "beta": float(cfg.objective.beta),
        "prepare_s": prepare,
        "by_batch_size": [run_batch_size(args, cfg, pairs, b) for b in batch_sizes],
    }
    return results


def report(results: dict[str, Any]) -> str:
    """The figures as markdown."""
    lines = [
        f"## Step DPO: ours vs TRL {results['versions']['trl']} DPOTrainer ({results['model']})\n",
        f"- torch {results['versions']['torch']}, transformers {results['versions']['transformers']}, "
        f"torch threads {results['threads']}, beta {results['beta']}",
    ]
    for r in results["by_batch_size"]:
        prompt, completion = r["prompt_tokens"], r["completion_tokens"]
        lines.append(
            f"- batch {r['batch_size']}: prompts {prompt[0]}-{prompt[-1]} tokens, completions "
            f"{completion[0]}-{completion[-1]} tokens; {r['timed_steps']} timed steps per side after one warm-up; "
            f"load average {r['load_average'][0]:.2f} -> {r['load_average'][1]:.2f}"
        )
        lines.append(
            f"  step-1 loss: ours {r['loss_ours_step1']:.6f}, TRL {r['loss_trl_step1']:.6f}, "
            f"|diff| {r['loss_abs_diff']:.1e} (mean Delta {r['margin_step1']:+.3f} nats); summed log-probs "
            f"rel. diff chosen {r['logps_chosen_rel_diff']:.1e}, rejected {r['logps_rejected_rel_diff']:.1e}; "
            f"TRL's own precomputed reference vs ours: max |diff| {r['trl_precomputed_ref_max_abs_diff']:.1e}"
        )
    lines += ["", "| batch | (a) ours s/step | (b) TRL s/step | TRL / ours | (c) ours, no shared prefix | (c) / (a) |",
              "|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in results["by_batch_size"]:
        m = r["median_s"]
        unshared = f"{m['ours_unshared']:.2f}" if "ours_unshared" in m else "-"
        unshared_ratio = f"{r['ratio_unshared_over_ours']:.2f}" if r["ratio_unshared_over_ours"] else "-"
        lines.append(
            f"| {r['batch_size']} | {m['ours']:.2f} | {m['trl']:.2f} | {r['ratio_trl_over_ours']:.2f} | "
            f"{unshared} | {unshared_ratio} |"
        )
    return "\n".join(lines)


def main() -> None:
    cli(parse_args, run, report)


if __name__ == "__main__":
    main()
