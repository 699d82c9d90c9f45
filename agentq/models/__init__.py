"""Models: loading (embedded GGUF, any HF model, a tiny random model), K-candidate sampling, log-probs."""

from agentq.models.loading import EmbeddedSmolLM2, HFModel, TinyRandomModel
from agentq.models.logprobs import completion_logprobs, pad_pairs, pair_logprobs
from agentq.models.sampling import Sample, sample_k

__all__ = [
    "EmbeddedSmolLM2",
    "HFModel",
    "Sample",
    "TinyRandomModel",
    "completion_logprobs",
    "pad_pairs",
    "pair_logprobs",
    "sample_k",
]
