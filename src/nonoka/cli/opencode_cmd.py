"""``nonoka opencode init``: set a project up so OpenCode runs its model steps through nonoka.

OpenCode loads a provider from a local folder when ``opencode.json`` names it as
``"npm": "file:/absolute/path"``. The provider ships inside this Python package
(``nonoka/opencode/provider/``, built from ``packages/nonoka-opencode-provider``), so
installing nonoka (``pip install .`` from a checkout, or its wheel) brings it; ``init``
copies it into ``<project>/.nonoka/`` (a stable path that survives reinstalls and
virtualenv moves) and points OpenCode at it, with the bridge command set to this very
interpreter so it works from a virtualenv.

The model entry states what the model behind it can do and costs, so OpenCode treats it
as it treats that model directly: images and PDFs (``attachment``, ``modalities``;
without them OpenCode replaces a file with an error text), ``reasoning``, ``temperature``
(OpenCode sends an agent's temperature only to a model marked so), its limits
(``limit.context`` decides when OpenCode compacts, ``limit.output`` the ``max_tokens`` it
asks for), ``cost`` (what OpenCode shows a session cost) and ``variants``, the thinking
levels OpenCode defines for that model family (``opencode run --variant high``), and for
an ``anthropic:`` model the ``anthropic-beta`` header OpenCode's own Anthropic provider
sends (``headers``; the bridge forwards it to Anthropic). They come
from nonoka's catalog (``nonoka.llm.catalog``, with the project's ``[models]`` tables in
``.nonoka/config.toml``) for the model ``--model``, the provider's ``model`` option,
``NONOKA_MODEL`` or the config file names, and from ``--attachments``, ``--reasoning``,
``--temperature``, ``--context`` and ``--output``, which state them for a model the catalog
does not know (or override it).

The entry is keyed by the model's spec (``nonoka/anthropic:claude-sonnet-4-5``): OpenCode
hands the provider the entry's API id, and chooses its system prompt by that id's model
family (``claude``, ``gpt-``...), as it does for the model directly. ``nonoka/default``
stays, an alias of the same model (its ``id`` is the spec), so configs that name it keep
working and get the same prompt.

Re-running is harmless: the copy is refreshed only when it differs, and the provider block
is merged into ``opencode.json`` without touching the user's other settings.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from nonoka.llm.catalog import KnownModel

__all__ = ("CONFIG_FILE", "DEFAULT_MODEL", "INSTALL_DIR", "PROVIDER_ID", "Capabilities",
           "InitError", "InitReport", "init_project", "model_entry", "opencode",
           "shipped_provider_dir", "thinking_variants")

PROVIDER_ID = "nonoka"
MODEL_ID = "default"
DEFAULT_MODEL = f"{PROVIDER_ID}/{MODEL_ID}"
CONFIG_FILE = "opencode.json"
INSTALL_DIR = Path(".nonoka") / "opencode-provider"
SCHEMA_URL = "https://opencode.ai/config.json"
DESCRIBED = ("attachment", "modalities", "reasoning", "temperature", "limit", "cost",
             "variants")
"""The fields of a model entry that describe the model (``model_entry`` writes them)."""
ANTHROPIC_BETA = "interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14"
"""The ``anthropic-beta`` header OpenCode's own Anthropic provider sends with every request
(its ``anthropic`` plugin, OpenCode 1.18.33): written into an ``anthropic:`` model's
``headers``, so OpenCode gives it to nonoka's provider and the same features reach
Anthropic (the bridge forwards it to ``anthropic:`` endpoints only)."""


class InitError(Exception):
    """Something ``init`` refuses to do; the message says what to do instead."""


@dataclass(frozen=True)
class Capabilities:
    """What a model can do, as ``--attachments``, ``--reasoning``, ``--temperature``,
    ``--context`` and ``--output`` state it; ``None``: not stated (the catalog's value, if
    it has one)."""

    attachments: bool | None = None
    """Images and PDFs in (OpenCode's ``attachment`` and ``modalities.input``)."""
    reasoning: bool | None = None
    context: int | None = None
    output: int | None = None
    temperature: bool | None = None
    """It takes a sampling temperature (OpenCode then sends an agent's)."""


@dataclass
class InitReport:
    """What ``init_project`` did, one line per action, for people."""

    config_path: Path
    provider_dir: Path
    actions: list[str] = field(default_factory=list)
    next_steps: list[str] = field(default_factory=list)
    changed: bool = False


def shipped_provider_dir() -> Path:
    """The compiled provider inside the installed package (``nonoka/opencode/provider``)."""
    return Path(__file__).resolve().parent.parent / "opencode" / "provider"


def bridge_command(python: str | None = None) -> list[str]:
    """``nonoka bridge`` run by this interpreter: works from a virtualenv, activated or not."""
    return [python or sys.executable, "-m", "nonoka", "bridge"]


def init_project(project: Path, *, python: str | None = None, model: str | None = None,
                 make_default: bool | None = None,
                 capabilities: Capabilities | None = None) -> InitReport:
    """Install the provider into ``project`` and merge its block into ``opencode.json``.

    ``model`` (a nonoka model spec such as ``openai:gpt-4o-mini``) is written to the
    provider's options; without it the provider's ``model`` option already in
    ``opencode.json``, else nonoka's own configuration, names the model. ``make_default``:
    ``True`` sets OpenCode's ``model`` to ``nonoka/default``, ``False`` never does, ``None``
    only when the config names no model yet. The model's entry (keyed by its spec, and the
    ``default`` alias) gets its capabilities, prices and thinking variants
    (``model_entry``): the catalog's for the configured model, with ``capabilities``
    stating or overriding them.
    """
    project = project.resolve()
    if not project.is_dir():
        raise InitError(f"{project} is not a directory; create it first, or name another "
                        "project with --dir")
    report = InitReport(config_path=project / CONFIG_FILE, provider_dir=project / INSTALL_DIR)
    spec = _configured_spec(project, model)
    entry = model_entry(project, spec, capabilities or Capabilities())
    _install_provider(report)
    _merge_config(report, python=python, model=model, make_default=make_default, spec=spec,
                  entry=entry)
    _describe_entry(report, spec, entry)
    _suggest(report, project, model)
    return report


# -- the model's capabilities ------------------------------------------------------------


def _configured_spec(project: Path, model: str | None) -> str | None:
    """The nonoka model ``nonoka/default`` runs: ``--model``, else the provider's ``model``
    option in ``opencode.json`` (an earlier ``--model``), else nonoka's configuration
    (``NONOKA_MODEL``, ``.nonoka/config.toml``); ``None`` when nothing names one."""
    from nonoka.config import configured_model
    from nonoka.errors import ConfigurationError

    chosen = model or _model_option(project / CONFIG_FILE)
    try:
        return configured_model(project, chosen)
    except ConfigurationError:  # none configured (or an unreadable config: run says so)
        return None


def _model_option(path: Path) -> str | None:
    """``provider.nonoka.options.model`` of ``opencode.json``, if it holds one (a config
    nonoka cannot read is reported when it is merged)."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
        model = config["provider"][PROVIDER_ID]["options"]["model"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return None
    return model if isinstance(model, str) and model.strip() else None


def model_entry(project: Path, spec: str | None, stated: Capabilities) -> dict[str, Any]:
    """The fields of OpenCode's model entry that say what ``spec`` can do and costs: the
    catalog's (``nonoka.llm.catalog``, with the project's ``[models]`` tables), each
    overridden by what ``stated`` sets, and the thinking ``variants`` OpenCode defines for
    the model's family (``thinking_variants``). Only what is known is written: an empty
    dict for a model nobody described and nothing stated."""
    known = _known_model(project, spec)

    def either(said: Any, name: str) -> Any:
        """What ``stated`` says, else the catalog's figure ``name``."""
        return said if said is not None else getattr(known, name, None)

    images = either(stated.attachments, "image_input")
    pdfs = either(stated.attachments, "pdf_input")
    reasoning = either(stated.reasoning, "reasoning")
    temperature = either(stated.temperature, "temperature")
    context = either(stated.context, "context_tokens")
    output = either(stated.output, "max_output_tokens")
    entry: dict[str, Any] = {}
    if images is not None or pdfs is not None:
        inputs = ["text", *(["image"] if images else []), *(["pdf"] if pdfs else [])]
        entry["attachment"] = bool(images or pdfs)
        entry["modalities"] = {"input": inputs, "output": ["text"]}
    if reasoning is not None:
        entry["reasoning"] = reasoning
    if temperature is not None:
        entry["temperature"] = temperature
    if (context is None) != (output is None):
        missing = "--output" if output is None else "--context"
        raise InitError(f"OpenCode needs both limits of a model; nonoka does not know "
                        f"{spec or 'the model'}'s, so give {missing} too")
    if context is not None and output is not None:
        if output > context:
            raise InitError(f"--output ({output}) cannot exceed --context ({context})")
        entry["limit"] = {"context": context, "output": output}
    if known is not None:
        entry["cost"] = _cost(known)
    if reasoning and spec is not None:
        variants = thinking_variants(spec, output)
        if variants:
            entry["variants"] = variants
    if spec is not None and spec.partition(":")[0] == "anthropic":
        entry["headers"] = {"anthropic-beta": ANTHROPIC_BETA}
    return entry


def _known_model(project: Path, spec: str | None) -> KnownModel | None:
    """The catalog's ``KnownModel`` for ``spec`` in ``project``, or ``None``."""
    from nonoka.errors import ConfigurationError
    from nonoka.llm.catalog import project_models

    if spec is None:
        return None
    try:
        return project_models(project).get(spec)
    except ConfigurationError as exc:
        raise InitError(str(exc)) from exc


def _cost(known: KnownModel) -> dict[str, float]:
    """OpenCode's ``cost`` (US dollars per million tokens) from the catalog's prices, as
    nonoka's ledger bills them: an unset cache rate is the input rate (OpenCode has one
    cache-write rate: the five-minute one, nonoka's default)."""
    prices = known.prices
    read = prices.input if prices.cache_read is None else prices.cache_read
    write = prices.input if prices.cache_write_5m is None else prices.cache_write_5m
    return {"input": prices.input, "output": prices.output, "cache_read": read,
            "cache_write": write}


# -- OpenCode's thinking variants --------------------------------------------------------
#
# OpenCode computes a model's variants (``opencode run --variant high``, the TUI's variant
# switch) from the AI SDK package that runs it (ProviderTransform.variants in OpenCode
# 1.18.33); for a provider of its own, such as nonoka's, it computes none and takes those
# of the model entry. These are its rules for the families nonoka's adapters speak to, in
# its order (OpenCode applies the first variant to its small calls, such as titles).
# Anthropic's keep OpenCode's own options (``thinking: {type, budgetTokens}``, ``effort``),
# which the Anthropic adapter takes as Anthropic's SDK provider does; the OpenAI-compatible
# ones set ``reasoningEffort``, which every OpenAI adapter sends as its API's reasoning
# effort (the Responses adapter asks for the summary and the encrypted reasoning itself).

_LOW_HIGH = ("low", "medium", "high")
_GPT5 = re.compile(r"(?:^|/)gpt-5(?:[.-]|$)")
_GPT5_MINOR = re.compile(r"(?:^|/)gpt-5[.-](\d+)(?:[.-]|$)")
_GPT5_PRO = re.compile(r"(?:^|/)gpt-5[.-]?pro(?:[.-]|$)")
_GPT5_MINOR_PRO = re.compile(r"(?:^|/)gpt-5[.-]\d+[.-]pro(?:[.-]|$)")
_OPENAI_FAMILY = re.compile(r"(?:^|/)(?:gpt-|o\d|codex|chatgpt)")
_CLAUDE_VERSION = re.compile(r"claude-(?:[a-z]+-)?(\d+)(?:[.-](\d{1,2}))?(?:[.@-]|$)",
                             re.IGNORECASE)
_CLAUDE_4_6 = ("opus-4-6", "opus-4.6", "4-6-opus", "4.6-opus", "sonnet-4-6", "sonnet-4.6",
               "4-6-sonnet", "4.6-sonnet")
_NO_VARIANTS = ("deepseek-chat", "deepseek-reasoner", "deepseek-r1", "deepseek-v3", "minimax",
                "glm", "kimi", "k2p", "qwen", "big-pickle")
"""Models OpenCode gives no variants (their thinking is on or off by model, not level)."""


def thinking_variants(spec: str, output: int | None) -> dict[str, dict[str, Any]]:
    """The variants OpenCode defines for the reasoning model ``spec`` runs, in its order,
    as options nonoka's provider hands its adapters; ``output`` is the model's
    ``limit.output`` (Anthropic's thinking budgets are kept below it)."""
    prefix, _, name = spec.partition(":")
    lower = name.lower()
    if prefix == "anthropic":
        return _claude_variants(lower, output)
    if any(word in lower for word in _NO_VARIANTS):
        return {}
    if prefix in ("openai", "openai-responses") and _OPENAI_FAMILY.search(lower):
        levels = _openai_levels(lower)
    elif prefix == "openrouter" and (lower.startswith("openai/") or "gpt" in lower):
        levels = _openrouter_openai_levels(lower)
    else:  # @ai-sdk/openai-compatible's
        levels = [*_LOW_HIGH, *(["max"] if "deepseek-v4" in lower else [])]
    return {level: {"reasoningEffort": level} for level in levels}


def _claude_variants(name: str, output: int | None) -> dict[str, dict[str, Any]]:
    """@ai-sdk/anthropic's: adaptive thinking by effort from Claude 4.6, budgets before."""
    new = _claude_4_7_or_later(name)
    if new or any(word in name for word in _CLAUDE_4_6):
        levels = ["low", "medium", "high", "xhigh", "max"] if new else [
            "low", "medium", "high", "max"]
        thinking = {"type": "adaptive", **({"display": "summarized"} if new else {})}
        return {level: {"thinking": dict(thinking), "effort": level} for level in levels}
    most = output or 64_000
    high = min(16_000, math.floor(most / 2 - 1))
    if "opus-4-5" in name or "opus-4.5" in name:
        return {level: {"thinking": {"type": "enabled", "budgetTokens": high}, "effort": level}
                for level in _LOW_HIGH}
    return {"high": {"thinking": {"type": "enabled", "budgetTokens": high}},
            "max": {"thinking": {"type": "enabled", "budgetTokens": min(31_999, most - 1)}}}


def _claude_4_7_or_later(name: str) -> bool:
    if "claude-" not in name:
        return False
    found = _CLAUDE_VERSION.search(name)
    if found is None:
        return True
    major, minor = int(found.group(1)), int(found.group(2) or 0)
    return major > 4 or (major == 4 and minor >= 7)


def _gpt5_minor(name: str) -> int | None:
    found = _GPT5_MINOR.search(name)
    return int(found.group(1)) or None if found else None


def _gpt5_numbered(name: str) -> list[str] | None:
    if _GPT5_MINOR_PRO.search(name):
        return ["medium", "high", "xhigh"]
    minor = _gpt5_minor(name)
    if minor is None:
        return None
    return ["none", *_LOW_HIGH] if minor == 1 else ["none", *_LOW_HIGH, "xhigh"]


def _codex(name: str) -> list[str] | None:
    if not _GPT5.search(name) or "codex" not in name:
        return None
    minor = _gpt5_minor(name)
    if minor is not None and minor >= 3:
        return ["none", *_LOW_HIGH, "xhigh"]
    if "codex-max" in name or (minor is not None and minor >= 2):
        return [*_LOW_HIGH, "xhigh"]
    return list(_LOW_HIGH)


def _chat(name: str) -> list[str] | None:
    if not _GPT5.search(name) or "-chat" not in name:
        return None
    return [] if _gpt5_minor(name) is None else ["medium"]


def _openai_levels(name: str) -> list[str]:
    """@ai-sdk/openai's levels for an OpenAI model (release dates unknown, as OpenCode
    has none for a model it does not list)."""
    if "deep-research" in name:
        return ["medium"]
    chat = _chat(name)
    if chat is not None:
        return chat
    if _GPT5_PRO.search(name):
        return ["high"]
    levels = _codex(name) or _gpt5_numbered(name)
    if levels:
        return levels
    return ["minimal", *_LOW_HIGH] if _GPT5.search(name) else list(_LOW_HIGH)


def _openrouter_openai_levels(name: str) -> list[str]:
    chat = _chat(name)
    if chat is not None:
        return chat
    if _GPT5_PRO.search(name):
        return ["high"]
    return _codex(name) or _gpt5_numbered(name) or ["none", "minimal", *_LOW_HIGH, "xhigh"]


def _describe_entry(report: InitReport, spec: str | None, entry: dict[str, Any]) -> None:
    if entry:
        said = []
        if "modalities" in entry:
            said.append("input " + "/".join(entry["modalities"]["input"]))
        if "reasoning" in entry:
            said.append("reasons" if entry["reasoning"] else "no reasoning")
        if "limit" in entry:
            said.append(f"context {entry['limit']['context']}, "
                        f"output {entry['limit']['output']}")
        if "temperature" in entry:
            said.append("temperature" if entry["temperature"] else "no temperature")
        if "cost" in entry:
            said.append(f"${entry['cost']['input']:g}/${entry['cost']['output']:g} per "
                        "million tokens in/out")
        if "variants" in entry:
            said.append("variants " + ", ".join(entry["variants"]))
        report.actions.append(f"{DEFAULT_MODEL} ({spec or 'the configured model'}): "
                              + "; ".join(said))
    if spec is not None:
        report.actions.append(f"model {PROVIDER_ID}/{spec}, and {DEFAULT_MODEL} as its alias: "
                              "OpenCode gives it the system prompt of its model family")
    if spec is not None and not {"modalities", "limit"} <= entry.keys():
        report.next_steps.append(
            f"nonoka does not know what {spec} can do, so OpenCode treats it as text-only "
            "with no known limits, no temperature and no cost: re-run with "
            "--attachments/--no-attachments, --reasoning/--no-reasoning, "
            "--temperature/--no-temperature, --context N and --output N, or describe it "
            f'in .nonoka/config.toml ([models."{spec}"], docs/models.md)')


# -- the provider files ------------------------------------------------------------------


def _install_provider(report: InitReport) -> None:
    from nonoka.errors import WorkspaceError
    from nonoka.store.statedir import ensure_state_dir

    source = shipped_provider_dir()
    files = sorted(p for p in source.glob("*") if p.is_file()) if source.is_dir() else []
    if not any(p.name == "package.json" for p in files):
        raise InitError(f"the OpenCode provider is missing from this installation ({source}); "
                        "reinstall nonoka, or build it with "
                        "bash packages/nonoka-opencode-provider/build.sh")
    target = report.provider_dir
    shown = INSTALL_DIR.as_posix() + "/"
    if _same_files(files, target):
        report.actions.append(f"provider in {shown} is up to date")
        return
    state_dir = target.parent
    try:  # the bridge keeps the session database here too: nonoka's own, never a link
        ensure_state_dir(state_dir)  # with its .gitignore: nothing of it belongs in git
    except WorkspaceError as exc:
        raise InitError(str(exc)) from None
    # Assemble next to the target, then swap, so OpenCode never loads half a provider.
    staging = Path(tempfile.mkdtemp(prefix=".opencode-provider.", dir=state_dir))
    try:
        for path in files:
            shutil.copy2(path, staging / path.name)
        staging.chmod(0o755)
        old = None
        if target.exists():
            old = state_dir / f".opencode-provider.old.{os.getpid()}"
            target.rename(old)
        staging.rename(target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    report.changed = True
    report.actions.append(f"installed the OpenCode provider in {shown} ({len(files)} files)")


def _same_files(files: list[Path], target: Path) -> bool:
    if not target.is_dir():
        return False
    present = sorted(p.name for p in target.iterdir())
    if present != [p.name for p in files]:
        return False
    return all((target / p.name).read_bytes() == p.read_bytes() for p in files)


# -- opencode.json -----------------------------------------------------------------------


def _merge_config(report: InitReport, *, python: str | None, model: str | None,
                  make_default: bool | None, spec: str | None,
                  entry: dict[str, Any]) -> None:
    path = report.config_path
    jsonc = path.with_name(CONFIG_FILE + "c")
    existed = path.exists()
    if not existed and jsonc.exists():
        raise InitError(f"{jsonc.name} exists and its comments would be lost if nonoka "
                        f"rewrote it; add this to its \"provider\" object yourself:\n"
                        + json.dumps({PROVIDER_ID: _provider_block({}, report, python, model,
                                                                   spec, entry)}, indent=2))
    config: dict[str, Any] = _read_config(path) if existed else {"$schema": SCHEMA_URL}
    before = json.dumps(config, sort_keys=True)
    providers = config.setdefault("provider", {})
    if not isinstance(providers, dict):
        raise InitError(f'{path.name}: "provider" is not an object; fix it and re-run')
    current = providers.get(PROVIDER_ID)
    if current is not None and not isinstance(current, dict):
        raise InitError(f'{path.name}: provider "{PROVIDER_ID}" is not an object; fix it and '
                        "re-run")
    providers[PROVIDER_ID] = _provider_block(current or {}, report, python, model, spec,
                                             entry)
    chosen = config.get("model")
    if make_default or (make_default is None and chosen is None):
        config["model"] = DEFAULT_MODEL
    if json.dumps(config, sort_keys=True) == before:
        report.actions.append(f"{path.name} already configures provider \"{PROVIDER_ID}\"; "
                              "left unchanged")
    else:
        _write_json(path, config)
        report.changed = True
        verb = "updated" if existed else "created"
        report.actions.append(f"{verb} {path.name}: provider \"{PROVIDER_ID}\" loads "
                              f"file:{report.provider_dir} and runs "
                              f"`{' '.join(bridge_command(python))}`")
    if str(config.get("model")).startswith(f"{PROVIDER_ID}/"):
        report.actions.append(f"OpenCode's default model is {config['model']}")
    else:
        report.next_steps.append(f"OpenCode's default model stays {config.get('model')}; pick "
                                 f"nonoka with --model {DEFAULT_MODEL} (or re-run with "
                                 "--make-default)")


def _provider_block(current: dict[str, Any], report: InitReport, python: str | None,
                    model: str | None, spec: str | None,
                    entry: dict[str, Any]) -> dict[str, Any]:
    """The nonoka block, keeping whatever the user added to it (other options, models).

    The model's entry, keyed by ``spec``, and ``default``, its alias (``id``: the API id
    OpenCode hands the provider and picks the system prompt by), get ``entry``'s fields;
    their other fields are kept. Without a ``spec``, ``default`` gets what is known."""
    block = dict(current)
    block["npm"] = f"file:{report.provider_dir}"
    block.setdefault("name", "nonoka")
    options = current.get("options")
    options = dict(options) if isinstance(options, dict) else {}
    options["command"] = bridge_command(python)
    # OpenCode then says which of its sessions each step belongs to (as promptCacheKey):
    # one OpenCode session, one nonoka line, whatever the conversations' content.
    options.setdefault("setCacheKey", True)
    if model:
        options["model"] = model
    block["options"] = options
    models = current.get("models")
    models = dict(models) if isinstance(models, dict) else {}
    if spec is not None:
        models[spec] = _merged_entry(models.get(spec), entry, spec, name=f"{spec} (nonoka)")
    default = _merged_entry(models.get(MODEL_ID), entry, spec,
                            name="nonoka (configured model)")
    if spec is not None:
        default["id"] = spec
    models[MODEL_ID] = default
    block["models"] = models
    return block


def _merged_entry(current: Any, entry: dict[str, Any], spec: str | None, *,
                  name: str) -> dict[str, Any]:
    """A model entry with ``entry``'s fields over ``current``'s. When ``current`` described
    another model (its ``id``), what it said that model can do and costs goes; while it
    describes the same one, the variants a user added beside OpenCode's levels stay."""
    merged = dict(current) if isinstance(current, dict) else {}
    headers = merged.get("headers")
    if merged.get("id", spec) != spec:
        for field_name in DESCRIBED:
            merged.pop(field_name, None)
        if isinstance(headers, dict):  # the user's own headers stay; the model's beta goes
            headers = {k: v for k, v in headers.items() if k != "anthropic-beta"}
            merged["headers"] = headers
            if not headers:
                del merged["headers"]
    kept = merged.get("variants")
    merged.setdefault("name", name)
    merged.update(entry)
    if "headers" in entry and isinstance(headers, dict):
        merged["headers"] = {**headers, **entry["headers"]}
    if "variants" in entry and isinstance(kept, dict):
        merged["variants"] = {**entry["variants"],
                              **{k: v for k, v in kept.items() if k not in entry["variants"]}}
    return merged


def _read_config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InitError(f"cannot read {path}: {exc}; make it readable, or move it aside "
                        "and re-run") from exc
    except json.JSONDecodeError as exc:
        raise InitError(f"{path} is not plain JSON ({exc.msg} at line {exc.lineno}); nonoka "
                        "merges only into plain JSON, so fix it (comments belong in "
                        "opencode.jsonc) and re-run") from exc
    if not isinstance(data, dict):
        raise InitError(f"{path} does not hold a JSON object; fix it and re-run")
    return data


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Replace ``path`` atomically, keeping its permissions when it exists."""
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _suggest(report: InitReport, project: Path, model: str | None) -> None:
    configured = (model or os.environ.get("NONOKA_MODEL", "").strip()
                  or (project / ".nonoka" / "config.toml").is_file())
    if not configured:
        report.next_steps.append(
            "choose nonoka's model: export NONOKA_MODEL=openai:gpt-4o-mini (plus "
            "OPENAI_API_KEY, and OPENAI_BASE_URL for another endpoint), or add "
            'model = "openai:gpt-4o-mini" to .nonoka/config.toml, or re-run with --model')
    report.next_steps.append(f'run: opencode run --model {DEFAULT_MODEL} "hello"   '
                             "(continue with: opencode run --continue \"...\")")


# -- the commands ------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"]},
             short_help="Use nonoka as OpenCode's model provider.")
def opencode() -> None:
    """Use nonoka as OpenCode's model provider."""


@opencode.command(short_help="Set this project up so OpenCode runs its steps via nonoka.")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              default=Path("."), metavar="DIR",
              help="The project directory (default: the current directory).")
@click.option("--model", metavar="PROVIDER:MODEL",
              help="nonoka's model for nonoka/default, e.g. openai:gpt-4o-mini (default: "
                   "NONOKA_MODEL or .nonoka/config.toml when OpenCode runs).")
@click.option("--make-default/--no-make-default", default=None,
              help="Make nonoka/default OpenCode's model (default: only if none is set).")
@click.option("--attachments/--no-attachments", default=None,
              help="The model takes images and PDFs (default: as nonoka's catalog says).")
@click.option("--reasoning/--no-reasoning", default=None,
              help="The model reasons before it answers (default: as the catalog says).")
@click.option("--temperature/--no-temperature", default=None,
              help="The model takes a sampling temperature, so OpenCode sends an agent's "
                   "(default: as the catalog says).")
@click.option("--context", type=click.IntRange(min=1), metavar="TOKENS",
              help="The model's context window (default: the catalog's).")
@click.option("--output", type=click.IntRange(min=1), metavar="TOKENS",
              help="The most tokens one answer may hold (default: the catalog's).")
def init(directory: Path, model: str | None, make_default: bool | None,
         attachments: bool | None, reasoning: bool | None, temperature: bool | None,
         context: int | None, output: int | None) -> None:
    """Set up this project so OpenCode runs every model step through nonoka.

    Copies the bundled provider into .nonoka/opencode-provider/ and merges a provider
    block "nonoka" into opencode.json, with the bridge command set to this Python's
    nonoka. The model's entry (nonoka/PROVIDER:MODEL, and nonoka/default as its alias)
    says what it can do and costs (images and PDFs, reasoning, temperature, limits,
    prices, OpenCode's thinking variants), from nonoka's catalog or the options. Safe to
    re-run: other settings are kept. The bridge keeps sessions in .nonoka/sessions.db, or where
    NONOKA_DATABASE_URL says (set it in the provider's env option to choose another
    database).
    """
    from nonoka.cli.voice import CliError

    stated = Capabilities(attachments=attachments, reasoning=reasoning, context=context,
                          output=output, temperature=temperature)
    try:
        report = init_project(directory, model=model, make_default=make_default,
                              capabilities=stated)
    except InitError as exc:
        raise CliError(str(exc), code="init_refused") from None
    for line in report.actions:
        click.echo(f"  {line}")
    if report.next_steps:
        click.echo("next:")
        for line in report.next_steps:
            click.echo(f"  - {line}")


if __name__ == "__main__":  # ``python -m nonoka.cli.opencode_cmd init`` works before wiring
    opencode()
