"""A stub of vLLM's OpenAI-compatible server, for the tests of ``engine=server``.

It speaks the part of the protocol the engine uses (``GET /v1/models``,
``POST /v1/completions`` with token-id prompts, ``n``, ``seed``, ``logprobs``,
``return_tokens_as_token_ids`` and ``stop_token_ids``, ``POST /v1/load_lora_adapter``)
and answers from a torch model in this process: real samples (``sample_k``, seeded
by the request's seed), real per-token log-probs, real adapter merges. It binds to
127.0.0.1 on a free port and stops with :meth:`close` (its thread is a daemon).
It is not a server to run anything on: no real one installs on this CPU machine.
"""

from __future__ import annotations

import copy
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
from peft import PeftModel

from agentq.models.sampling import sample_k

REQUIRED = {"model", "prompt", "n", "max_tokens", "logprobs", "return_tokens_as_token_ids", "stop_token_ids"}


class OpenAIStub:
    def __init__(self, model: torch.nn.Module, tokenizer, served_model: str = "base") -> None:
        self.tokenizer = tokenizer
        self.base = model.eval()
        self.models = {served_model: self.base}
        self.requests: list[tuple[str, dict]] = []  # (path, body) of every POST, in order
        self._lock = threading.Lock()  # one forward at a time
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                if self.path != "/v1/models":
                    return self.answer(404, {"error": f"no route {self.path}"})
                self.answer(200, {"object": "list", "data": [{"id": name, "object": "model"} for name in stub.models]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append((self.path, body))
                route = {"/v1/completions": stub.complete, "/v1/load_lora_adapter": stub.load_adapter}.get(self.path)
                if route is None:
                    return self.answer(404, {"error": f"no route {self.path}"})
                self.answer(*route(body))

            def answer(self, status: int, payload) -> None:
                data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, name="openai stub", daemon=True).start()

    def completions(self) -> list[dict]:
        return [body for path, body in self.requests if path == "/v1/completions"]

    def load_adapter(self, body: dict):
        name, path = body["lora_name"], body["lora_path"]
        if name in self.models:
            return 400, {"error": f"The lora adapter '{name}' has already been loaded."}
        with self._lock:
            self.models[name] = PeftModel.from_pretrained(copy.deepcopy(self.base), path).merge_and_unload().eval()
        return 200, f"Success: LoRA adapter '{name}' added successfully."

    def complete(self, body: dict):
        missing = REQUIRED - body.keys()
        if missing:
            return 400, {"error": f"the engine must send {sorted(missing)}"}
        if body["model"] not in self.models:
            return 404, {"error": f"The model `{body['model']}` does not exist."}
        prompt = body["prompt"]
        if not (isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)):
            return 400, {"error": "the stub takes prompts as token ids"}
        model = self.models[body["model"]]
        generator = None if body.get("seed") is None else torch.Generator().manual_seed(body["seed"])
        with self._lock:
            samples = sample_k(
                model, prompt, body["n"], tokenizer=self.tokenizer, max_new_tokens=body["max_tokens"],
                temperature=body.get("temperature", 1.0), top_p=body.get("top_p", 1.0),
                eos_token_ids=body["stop_token_ids"], generator=generator,
            )  # fmt: skip
            choices = [self.choice(model, prompt, index, sample) for index, sample in enumerate(samples)]
        return 200, {"object": "text_completion", "model": body["model"], "choices": choices}

    @torch.no_grad()
    def choice(self, model, prompt: list[int], index: int, sample) -> dict:
        """vLLM's shape: the end token among the tokens, ``stop_reason`` None on an end token."""
        ids = list(sample.token_ids)
        logits = model(input_ids=torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
        token_logprobs = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids)[:, None]).squeeze(1)
        return {
            "index": index,
            "text": sample.text,
            "logprobs": {"tokens": [f"token_id:{t}" for t in ids], "token_logprobs": token_logprobs.tolist()},
            "finish_reason": "stop" if sample.finished else "length",
            "stop_reason": None,
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
