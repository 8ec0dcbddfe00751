"""docs/configuration.md, generated from the config dataclasses (never written by hand).

Every key of every configuration a user sets (env rules, the three algorithms, the
tournament, the backtest, data set recipes), with its type, default and the text of
its docstring: an attribute docstring (a string right after the field) or the
class docstring's ``:param name:`` line. ``python tools/config_reference.py``
rewrites the file (``make docs``); a test fails when it is out of date.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

SECTIONS = (
    (
        "Env rules",
        "market_envs.config:EnvConfig",
        "How the market env trades, pays and rewards. Python: `EnvConfig(...)`, `trader.train(..., env_config=...)`; "
        "TOML: the `env_config` table of `config.toml`'s `[env]`, the `[env.rules]` table of `tournament.toml`.",
    ),
    (
        "Cost model",
        "market_envs.costs:CostModel",
        "Every cost and fill term beyond the commission rate per side: `EnvConfig(costs=CostModel(...))`; TOML: the "
        "`[env_config.costs]` table. Named models: `market_envs.costs.cost_model(name)` (zero, flat, retail, institutional).",
    ),
    (
        "PPO",
        "trader.agents.ppo:PPOConfig",
        "`trader train --algo ppo --config FILE` (a TOML file of these keys, or a run's `config.toml`), "
        "`trader.train('ppo', ..., config={...})`, `[algo_configs.ppo]` of a tournament.",
    ),
    ("SAC", "trader.agents.sac:SACConfig", "`--algo sac`; the off-policy keys are shared with TD3."),
    ("TD3", "trader.agents.td3:TD3Config", "`--algo td3`."),
    (
        "Tournament",
        "tournament.config:TournamentConfig",
        "`trader tournament --config FILE` (these keys at the top level) and its flags; `tournament.run(TournamentConfig(...))`.",
    ),
    (
        "Backtest",
        "trader.backtesting.config:BacktestConfig",
        "`trader backtest RUN_DIR` flags; `trader.backtesting.run_backtest(..., config=BacktestConfig(...))`.",
    ),
    (
        "Data set recipe",
        "market_envs.data.recipes:Recipe",
        "A TOML file in `datasets/` (or anywhere, given by path); the schema is in datasets/README.md.",
    ),
    (
        "Synthetic market",
        "market_envs.data.synthetic:MarketModel",
        "The `[synthetic.model]` table of a synthetic recipe.",
    ),
    ("Planted edge", "market_envs.data.edge:EdgeSpec", "The `[synthetic.edge]` table of a synthetic recipe."),
)

HEADER = """# Configuration reference

Generated from the config dataclasses by `python tools/config_reference.py` (`make docs`);
do not edit by hand: change the docstring in the code and regenerate. A test fails when
this file is out of date.
"""


def render() -> str:
    """The whole reference as Markdown."""
    parts = [HEADER]
    parts += [f"- [{title}](#{_anchor(title)})" for title, _, _ in SECTIONS]
    for title, target, where in SECTIONS:
        parts.append(_section(title, resolve_section(target), where))
    return "\n".join(parts) + "\n"


def _section(title: str, cls: type, where: str) -> str:
    module = cls.__module__
    lines = ["", f"## {title}", "", f"`{module}.{cls.__name__}`. {where}", ""]
    lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
    docs = field_docs(cls)
    for item in dataclasses.fields(cls):
        if not item.init:
            continue
        lines.append(
            f"| `{item.name}` | {_cell(_type_name(item.type))} | {_cell(_default(item))} | "
            f"{_cell(docs.get(item.name, ''))} |"
        )
    return "\n".join(lines)


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> its documentation, from the class and its dataclass bases."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        docs.update(_param_docs(klass.__doc__ or ""))
        docs.update(_attribute_docs(klass))
    return docs


def _attribute_docs(cls: type) -> dict[str, str]:
    """Strings right after an annotated field in the class body."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    body = ast.parse(source).body[0].body
    docs = {}
    for node, following in zip(body, body[1:], strict=False):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if (
                isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs[node.target.id] = _one_paragraph(following.value.value)
    return docs


def _param_docs(docstring: str) -> dict[str, str]:
    """``:param name: text`` entries of a docstring (continuation lines joined)."""
    text = inspect.cleandoc(docstring)
    docs = {}
    for match in re.finditer(r":param (\w+):(.*?)(?=\n\s*:param |\n\s*\n|\Z)", text, re.S):
        docs[match.group(1)] = _one_paragraph(match.group(2))
    return docs


def _one_paragraph(text: str) -> str:
    return " ".join(inspect.cleandoc(text).split())


def resolve_section(target: str) -> type:
    """The config class a `SECTIONS` entry names (``"module:Class"``)."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _type_name(annotation: Any) -> str:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", repr(annotation))
    return text.replace("typing.", "")


def _default(item: dataclasses.Field) -> str:
    if item.default is not dataclasses.MISSING:
        return f"`{item.default!r}`"
    if item.default_factory is not dataclasses.MISSING:
        return f"`{item.default_factory()!r}`"
    return "(required)"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _anchor(title: str) -> str:
    return re.sub(r"[^a-z0-9 -]", "", title.lower()).replace(" ", "-")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
    out.write_text(render(), encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
