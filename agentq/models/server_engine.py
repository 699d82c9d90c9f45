"""K candidates from a shared OpenAI-compatible inference server (``engine=server``).

The policy's requests go over HTTP to a server given by URL (``vllm serve``, or any
server that speaks the same protocol): one ``POST /v1/completions`` per node with
``n=K``, the prompt as token ids, a seed drawn from the search's generator, and the
sampled tokens' log-probs. Requests of concurrent searches (``collect.concurrency``,
``eval.concurrency``, Ray actors) go out at once and the server batches them.

The protocol is vLLM's OpenAI-compatible server with its extensions:

- ``prompt`` as a list of token ids (the OpenAI completions API allows it);
- ``return_tokens_as_token_ids``: the completion's tokens come back as
  ``"token_id:<id>"``, so its ids are exact, not re-tokenised from text;
- ``stop_token_ids`` and ``seed``;
- ``POST /v1/load_lora_adapter`` (``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``,
  ``--enable-lora``): after each iteration pi_i reaches the server as one LoRA
  adapter, the run's adapters stacked (:mod:`agentq.models.stacking`), named by a
  hash of their contents; requests then name it as their ``model``. Adapters stay
  loaded (Ray actors of one phase share them; a run has a few).

Start the server with ``--logprobs-mode raw_logprobs`` (vLLM >= 0.10.2): the data
keeps the raw log-probs (docs/method.md §11). The server's numerics are not the
trainer's, so the DPO reference comes from the trainer's forward pass; the
critic and the judge stay in this process. Every tree records the name of the
weights that sampled it (``SearchResult.weights``).

**Tested here against a stub**, not a real server: no OpenAI-compatible server with
runtime LoRA installs on this CPU machine from the package registries.
``tests/openai_stub.py`` answers the same requests from the tiny test model (real
sampling, real adapter merges) and checks their fields; SGLang and llama.cpp's
server take similar requests but were not tried.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import torch

from agentq.models.engine import request_seed
from agentq.models.sampling import Sample
from agentq.models.stacking import adapter_chain, stack_adapters
from agentq.models.vllm_engine import (
    check_request,
    completed_sample,
    k_completions,
    sampling_kwargs,
)

log = logging.getLogger(__name__)

TOKEN_PREFIX = "token_id:"  # how return_tokens_as_token_ids spells a token


class ServerError(RuntimeError):
    """The server refused a request or could not be reached."""


def post(url: str, body: dict, *, timeout: float, api_key: str | None = None) -> Any:
    """POST ``body`` as JSON; the decoded JSON answer (plain text when it is not JSON)."""
    return call(urllib.request.Request(url, data=json.dumps(body).encode(), method="POST"), timeout, api_key)


def get(url: str, *, timeout: float, api_key: str | None = None) -> Any:
    return call(urllib.request.Request(url, method="GET"), timeout, api_key)


def call(request: urllib.request.Request, timeout: float, api_key: str | None) -> Any:
    request.add_header("Content-Type", "application/json")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read().decode()
    except urllib.error.HTTPError as e:
        raise ServerError(f"{request.full_url} answered {e.code}: {e.read().decode(errors='replace')[:500]}") from e
    except (urllib.error.URLError, OSError) as e:
        raise ServerError(f"no server answers at {request.full_url} ({e})") from e
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def adapters_digest(adapters: Sequence[Path]) -> str:
    """A name for the weights the adapters make, from their files' contents (in order)."""
    digest = hashlib.sha256()
    for adapter in adapters:
        for name in ("adapter_config.json", "adapter_model.safetensors"):
            digest.update((Path(adapter) / name).read_bytes())
    return digest.hexdigest()[:16]


def samples_from_choices(answer: dict, k: int, *, tokenizer, eos_token_ids: Collection[int]) -> list[Sample]:
    """Our samples from one completions answer (a single greedy choice is repeated ``k`` times)."""
    eos = set(eos_token_ids)
    samples = []
    for choice in k_completions(sorted(answer["choices"], key=lambda choice: choice["index"]), k, "server"):
        logprobs = choice.get("logprobs") or {}
        tokens, token_logprobs = logprobs.get("tokens"), logprobs.get("token_logprobs")
        if tokens is None or token_logprobs is None or any(not t.startswith(TOKEN_PREFIX) for t in tokens):
            raise ServerError(
                "the server returned no token ids with log-probs: it must take logprobs and "
                "return_tokens_as_token_ids (vLLM's OpenAI-compatible server does)"
            )
        ids = [int(token[len(TOKEN_PREFIX) :]) for token in tokens]
        finished = choice.get("finish_reason") == "stop"
        stop = choice.get("stop_reason")
        if finished and (not ids or ids[-1] not in eos) and isinstance(stop, int) and stop in eos:
            ids.append(stop)  # a server that leaves the stop token out of the tokens it lists
            token_logprobs = [*token_logprobs, 0.0]
        samples.append(completed_sample(ids, sum(token_logprobs), finished, tokenizer=tokenizer, eos_token_ids=eos))
    return samples


class ServerEngine:
    """Samples from pi_i on an OpenAI-compatible server that holds the base model.

    Args:
        model: the policy's torch model (kept in this process for training and the critic).
        tokenizer: decodes completions (prompts go out as token ids).
        url: the server's root, e.g. ``http://127.0.0.1:8000``.
        served_model: the name the server serves the base model under (``--served-model-name``).
        base_adapter: ``model.adapter``, LoRA adapters merged into the base on load (a behaviour-cloned
            base): the server serves them as the first of the stacked adapters.
        adapter_dir: where stacked adapters are written; the server reads them by path, so it
            must see this folder at the same path.
        timeout: seconds a request may take.
        api_key_env: the environment variable holding the server's API key (unset: none).
    """

    exact = False  # the server's kernels, not the trainer's
    batches = True  # the server batches the requests of concurrent searches
    constrains = False  # no per-step logits mask over HTTP

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer,
        *,
        url: str,
        served_model: str,
        base_adapter: str | Sequence[str] | None = None,
        adapter_dir: str | Path,
        timeout: float = 600.0,
        api_key_env: str = "AGENTQ_SERVER_API_KEY",
    ) -> None:
        self.tokenizer = tokenizer
        self.url = url.rstrip("/")
        self.served_model = served_model
        self.base_adapters = adapter_chain(base_adapter)
        self.adapter_dir = Path(adapter_dir).expanduser()
        self.timeout = float(timeout)
        self.api_key = os.environ.get(api_key_env) or None
        self.weights_name = served_model
        self._torch_lock = threading.Lock()
        self.serve(model)

    @staticmethod
    def check_args(key: str, *, url: Any = None, served_model: Any = None, api_key_env: str = "", **_) -> None:
        """The server answers and serves ``served_model``: refused before any model loads."""
        if not (isinstance(url, str) and url.startswith(("http://", "https://"))):
            raise ValueError(f"{key}.url must be the server's http(s):// root, e.g. http://127.0.0.1:8000, got {url!r}")
        try:
            listed = get(f"{url.rstrip('/')}/v1/models", timeout=10, api_key=os.environ.get(api_key_env) or None)
        except ServerError as e:
            raise ValueError(f"{key}.url={url}: {e}: start the server first (docs/scaling.md)") from e
        names = [entry.get("id") for entry in listed.get("data", [])] if isinstance(listed, dict) else []
        if served_model not in names:
            raise ValueError(f"{key}.served_model={served_model!r} is not served at {url} (it serves {names})")

    def serve(self, model: torch.nn.Module, adapters: Sequence[Path] = ()) -> None:
        """Serve the base with ``base_adapter`` and ``adapters`` merged in order, as one
        LoRA adapter loaded at run time (``model`` is their merge, kept in this process)."""
        chain = [*self.base_adapters, *map(Path, adapters)]
        if not chain:
            self.weights_name = self.served_model
            return
        name = f"agentq-{adapters_digest(chain)}"
        path = chain[0] if len(chain) == 1 else self.stacked(chain, self.adapter_dir / name)
        try:
            post(f"{self.url}/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path.resolve())},
                 timeout=self.timeout, api_key=self.api_key)  # fmt: skip
        except ServerError as e:
            if "already" not in str(e):  # loaded by an earlier run, a Ray actor or a resume
                raise ServerError(f"loading the policy's adapter {name} from {path}: {e}") from e
        log.info("engine=server: serving %s (%d adapter(s) on %s)", name, len(chain), self.served_model)
        self.weights_name = name

    @staticmethod
    def stacked(chain: Sequence[Path], folder: Path) -> Path:
        """The stacked adapter of ``chain`` in ``folder``, written once (whole or not at all)."""
        if not folder.exists():
            partial = folder.with_name(f".{folder.name}.partial")
            shutil.rmtree(partial, ignore_errors=True)
            stack_adapters(chain, partial)
            partial.rename(folder)
        return folder

    def sample(
        self,
        prompt_ids: Sequence[int],
        k: int,
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float = 1.0,
        eos_token_ids: Collection[int],
        generator: torch.Generator | None = None,
        constraint=None,
        prefix_cache=None,  # the server's prefix caching serves instead
    ) -> list[Sample]:
        """As :func:`agentq.models.sampling.sample_k`; the request's seed comes from ``generator``."""
        check_request("server", k, constraint)
        seed = request_seed(generator)
        body = {
            "model": self.weights_name,
            "prompt": [int(t) for t in prompt_ids],
            "return_tokens_as_token_ids": True,
            **sampling_kwargs(k, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                              eos_token_ids=eos_token_ids, seed=seed),
        }  # fmt: skip
        answer = post(f"{self.url}/v1/completions", body, timeout=self.timeout, api_key=self.api_key)
        if not isinstance(answer, dict) or "choices" not in answer:
            raise ServerError(f"{self.url}/v1/completions answered without choices: {str(answer)[:300]}")
        if answer.get("model", self.weights_name) != self.weights_name:
            raise ServerError(f"asked {self.weights_name} for a completion, answered by {answer['model']!r}")
        return samples_from_choices(answer, k, tokenizer=self.tokenizer, eos_token_ids=eos_token_ids)

    def run(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` (the critic's torch forwards), one at a time: the server computes elsewhere."""
        with self._torch_lock:
            return fn()

    def close(self) -> None:
        pass  # adapters stay loaded: the server outlives the run
