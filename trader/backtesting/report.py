"""Writing a backtest into a run directory, and formatting its metrics table.

Layout written under the run directory:

- `backtests/<strategy>.parquet`: one row per bar: timestamp, value, return, cash,
  turnover, traded_value, costs, and `positions` (shares per ticker as a
  fixed-size list in the order of the file's `tickers` metadata and of
  report.json; null on bars where positions were not recorded);
- `report.json`: period, costs, data set, strategies, the metrics table; the cost
  model in force (``cost_model``), each strategy's costs broken down (``costs``) and
  its breakeven cost (``breakeven``, when multiples of the cost model were run); each
  strategy against the benchmark (``versus_benchmark``) and each agent against the
  yardstick of its kind (``versus_yardsticks``);
- `report.md`: the same as Markdown tables, one row per strategy by Sharpe;
- `tearsheet_<strategy>.png`: pyfolio-reloaded's returns tear sheet of each agent
  (policies and library baselines, the best `MAX_TEAR_SHEETS` by Sharpe), against the
  benchmark's daily returns when there is one;
- `dataset.json`: the data set's `MarketData.describe()` (tickers, periods, tradable
  fraction, benchmark), for the dashboard's data page.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from market_envs.data.panel import fill_price
from trader import rundir
from trader.backtesting.result import BacktestResult
from trader.rundir import SERIES_COLUMNS
from trader.metrics import METRIC_LABELS, PERCENT_METRICS
from trader.names import counted

TABLE_COLUMNS = (
    "cum_returns_final",
    "annual_return",
    "annual_volatility",
    "sharpe_ratio",
    "turnover",
    "sortino_ratio",
    "max_drawdown",
    "calmar_ratio",
)
"""The metrics printed in the terminal and Markdown tables (report.json holds them all); turnover
beside the Sharpe ratio, since under costs the one is read with the other."""


def format_value(metric: str, value: float) -> str:
    """A metric value as table text: percentages for returns, two decimals for ratios."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if metric in PERCENT_METRICS:
        return f"{100.0 * value:.2f}%"
    if metric == "days":
        return f"{int(value)}"
    return f"{value:.2f}"


def table_rows(result: BacktestResult) -> tuple[list[str], list[list[str]]]:
    """Header and text rows of the metrics table (strategies by Sharpe, best first)."""
    columns = [c for c in TABLE_COLUMNS if c in result.metrics.columns]
    header = ["Strategy", *(METRIC_LABELS[c] for c in columns)]
    labels = result.labels()
    rows = [
        [labels.get(name, name), *(format_value(c, float(row[c])) for c in columns)]
        for name, row in result.metrics.iterrows()
    ]
    return header, rows


EVIDENCE_HEADER = [
    "Strategy",
    "Sharpe",
    "95% interval",
    "PSR",
    "Trials",
    "DSR (0-Sharpe trials)",
    "DSR (trials' spread)",
    "Verdict",
]


def evidence_rows(result: BacktestResult) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the evidence table (in the metrics table's order): the
    Sharpe ratio's 95% interval (stationary bootstrap), PSR, the trials a selected
    strategy was chosen from, its DSR against as many zero-Sharpe trials (the one the
    verdict follows) and its DSR with V[SR] from the trials' own Sharpe ratios (Bailey
    and López de Prado), and the verdict (docs/reading-results.md)."""
    labels = result.labels()
    rows = []
    for name in result.metrics.index:
        row = result.evidence.get(str(name))
        if row is None:
            continue
        interval = row.get("interval_bootstrap")
        rows.append(
            [
                labels.get(name, name),
                _ratio(row.get("sharpe")),
                "n/a" if interval is None else f"[{interval[0]:.2f}, {interval[1]:.2f}]",
                _ratio(row.get("psr")),
                "-" if row.get("n_trials") is None else str(row["n_trials"]),
                *(
                    (_ratio(row.get("dsr_null")), _ratio(row.get("dsr")))
                    if row.get("n_trials") is not None
                    else ("-", "-")
                ),
                row["sentence"],
            ]
        )
    return list(EVIDENCE_HEADER), rows


MARKET_HEADER = ["Strategy", "Beta", "Alpha", "95% interval", "Tracking error", "Information ratio", "Correlation"]


def market_rows(result: BacktestResult) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the table against the benchmark (in the metrics table's order): beta,
    annualised alpha with its 95% interval, tracking error, information ratio and the correlation
    of daily returns with the benchmark's (`BacktestResult.versus_benchmark`)."""
    labels = result.labels()
    rows = []
    for name in result.metrics.index:
        row = result.versus_benchmark.get(str(name))
        if row is None:
            continue
        interval = row["alpha_interval"]
        rows.append(
            [
                labels.get(name, name),
                _ratio(row["beta"]),
                _percent(row["alpha"]),
                "n/a" if interval is None else f"[{_percent(interval[0])}, {_percent(interval[1])}]",
                _percent(row["tracking_error"]),
                _ratio(row["information_ratio"]),
                _ratio(row["correlation"]),
            ]
        )
    return list(MARKET_HEADER), rows


def _percent(value: Any) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def yardstick_lines(result: BacktestResult) -> list[str]:
    """Each agent's verdict against the yardstick of its kind, one sentence each (`BacktestResult.versus_yardsticks`)."""
    labels = result.labels()
    return [f"{labels.get(name, name)}: {row['sentence']}" for name, row in result.versus_yardsticks.items()]


def selection_lines(result: BacktestResult) -> list[str]:
    """The selection's sentences: the validation winner after all trials, PBO, SPA."""
    from trader.backtesting.evidence import sentences

    return sentences({}, result.selection, result.labels()) if result.selection else []


def spread_lines(result: BacktestResult) -> list[str]:
    """A tournament's result against its own pods, in words (`trader.backtesting.spread`); none for other runs."""
    return ["The result against its own pods: " + text for text in result.spread["sentences"]] if result.spread else []


def _ratio(value: Any) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def aligned(header: list[str], rows: list[list[str]], left: tuple[int, ...] = (0,)) -> str:
    """Rows as aligned plain text (for pipes and logs): columns in ``left`` to the left."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


COST_HEADER = ["Strategy", "Costs", "bp traded", "Commission", "Spread", "Impact", "Borrow", "Unfilled", "Breakeven"]


def cost_rows(result: BacktestResult) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the cost table (in the metrics table's order): total costs in the
    data's currency and in basis points of the value traded, each part in bp of the value
    traded, the unfilled share of the orders and the breakeven cost (a multiple of the
    cost model; "-" when no multiples were run)."""
    labels = result.labels()
    rows = []
    for name in result.metrics.index:
        row = result.costs.get(str(name))
        if row is None:
            continue
        edge = result.breakeven.get(str(name))
        rows.append(
            [
                labels.get(name, name),
                f"{row['costs']:,.0f}",
                _bps(row["costs_bps"]),
                *(_bps(row[f"{part}_bps"]) for part in ("commission", "spread", "impact", "borrow")),
                "n/a" if row["unfilled_share"] is None else f"{100 * row['unfilled_share']:.1f}%",
                edge["text"] if edge else "-",
            ]
        )
    return list(COST_HEADER), rows


def _bps(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def cost_model_line(model: dict[str, Any]) -> str:
    """The cost model in force, in words: its name, commission, half-spread, impact, cap and borrow fee."""
    if not model:
        return "costs: not recorded"
    terms = model["costs"]
    commission = f"{100 * model['buy_cost']:.2f}% per buy, {100 * model['sell_cost']:.2f}% per sell"
    if terms["commission_per_share"] or terms["commission_min"] or terms["commission_max_rate"] is not None:
        commission += f" + {terms['commission_per_share']:g} a share, at least {terms['commission_min']:g}"
        if terms["commission_max_rate"] is not None:
            commission += f", at most {100 * terms['commission_max_rate']:g}% of the order"
    parts = [f"commission {commission}"]
    if terms["spread_model"] == "high_low":
        scale = "" if terms["spread_scale"] == 1 else f" x {terms['spread_scale']:g}"
        parts.append(f"half-spread estimated from high and low (Abdi-Ranaldo, {terms['spread_window']} bars){scale}")
    elif terms["spread_model"] == "per_ticker":
        parts.append("half-spread per ticker")
    elif terms["spread_bps"]:
        parts.append(f"half-spread {terms['spread_bps']:g} bp")
    if terms["impact_eta"]:
        parts.append(f"square-root impact, eta {terms['impact_eta']:g} ({terms['impact_window_days']} days)")
    if terms["participation"] is not None:
        parts.append(f"at most {100 * terms['participation']:g}% of a bar's volume fills")
    if terms["borrow_rate"]:
        parts.append(f"borrow {100 * terms['borrow_rate']:g}% a year")
    return f"cost model {model['name']}: " + "; ".join(parts)


def plain_table(result: BacktestResult) -> str:
    """The metrics table, then the cost table, the evidence table, the selection's sentences and a
    tournament's result against its own pods, as aligned plain text."""
    text = aligned(*table_rows(result))
    header, rows = cost_rows(result)
    if rows:
        text += "\n\nCosts (bp of the value traded) and the breakeven cost (a multiple of the cost model):\n"
        text += aligned(header, rows)
    header, rows = evidence_rows(result)
    if rows:
        text += "\n\n" + aligned(header, rows, left=(0, len(header) - 1))
    header, rows = market_rows(result)
    if rows:
        text += f"\n\nAgainst the benchmark ({result.benchmark_name or 'benchmark'}), from daily returns:\n"
        text += aligned(header, rows)
    lines = yardstick_lines(result) + selection_lines(result) + spread_lines(result)
    return text + ("\n\n" + "\n".join(lines) if lines else "")


def context_lines(result: BacktestResult) -> list[str]:
    """Data set, period, capital and costs, in words."""
    config = result.config
    benchmark = f", benchmark {result.benchmark_name}" if result.benchmark_name else ""
    period = result.period
    return [
        f"Data set: {result.dataset} ({counted(len(result.tickers), 'ticker')}{benchmark})",
        f"Period: {period.name}, {period.start} .. {period.end} "
        f"({counted(period.days, 'trading day')}, {counted(period.bars, 'bar')})",
        f"Start capital: ${config['initial_cash']:,.0f}; {cost_model_line(result.cost_model)}",
        f"Orders decided at a bar fill at the next bar's {fill_price(result.missing_columns)}; "
        "metrics from daily returns, 252 days a year.",
        *(
            [
                f"The data has no {', '.join(result.missing_columns)}: filled from the close (volume 0); "
                f"features made of them left out of the agents' observation."
            ]
            if result.missing_columns
            else []
        ),
    ]


def markdown_report(result: BacktestResult) -> str:
    """report.md: context lines and the metrics table, one row per strategy by Sharpe."""
    header, rows = table_rows(result)
    lines = ["# Backtest report", "", *(f"- {text}" for text in context_lines(result)), ""]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
    lines.extend("| " + " | ".join(r) + " |" for r in rows)
    lines.extend(["", f"Best by Sharpe ratio: {result.labels()[result.best]}.", ""])
    header, rows = evidence_rows(result)
    if rows:
        lines.extend(
            [
                "## Is the edge real?",
                "",
                "Sharpe ratio with its 95% interval (stationary bootstrap), PSR (probability that the "
                "true Sharpe is above 0), and for a strategy selected among trials its deflated Sharpe "
                "ratio (DSR); on the test period the DSR is conservative. How to read them: "
                "docs/reading-results.md.",
                "",
            ]
        )
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "|".join(["---"] + ["---:"] * (len(header) - 2) + ["---"]) + "|")
        lines.extend("| " + " | ".join(r) + " |" for r in rows)
        lines.append("")
    selection = selection_lines(result)
    if selection:
        lines.extend(["The selection, on the validation period:", "", *(f"- {text}" for text in selection), ""])
    lines.extend(spread_section(result.spread))
    lines.extend(market_section(result))
    header, rows = cost_rows(result)
    if rows:
        lines.extend(
            [
                "## Costs",
                "",
                "Every strategy trades under the same cost model. Costs over the period in the data's "
                "currency and in basis points (bp) of the value traded, per part; the share of the value "
                "ordered that the participation cap left unfilled, over every bar's orders (a remainder "
                "ordered again on the next bar counts again); " + _breakeven_sentence(result),
                "",
            ]
        )
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
        lines.extend("| " + " | ".join(r) + " |" for r in rows)
        lines.append("")
    lines.extend(membership_section(result))
    trained = [s for s in result.strategies.values() if s.training]
    if trained:
        lines.extend(["Baseline libraries, as trained:", ""])
        lines.extend(f"- {s.label}: {training_line(s.training)}" for s in trained)
        lines.append("")
    return "\n".join(lines)


SPREAD_HEADER = ["Period", "Pods placed", "Result", "Rank", "At or above", "Median", "IQM", "Lowest 10% (CVaR)", "Best"]


def spread_rows(record: dict[str, Any]) -> list[list[str]]:
    """One row per period where the result has a standing among its pods (`trader.backtesting.spread`):
    a period without one is a sentence, never a row of NaN."""
    parts = [("validation", record["validation"])]
    if record["backtest"] is not None:
        parts.append((f"{record['backtest']['period']} (net Sharpe)", record["backtest"]))
    rows = []
    for name, part in parts:
        found = part["standing"]
        if found is None:
            continue
        rows.append(
            [
                name,
                f"{found['n']} of {record['finished']}",
                f"{found['value']:.2f}",
                str(found["rank"]),
                f"{found['percentile']:.0f}%",
                *(f"{found[key]:.2f}" for key in ("median", "iqm", "cvar10", "best")),
            ]
        )
    return rows


def spread_section(record: dict[str, Any] | None) -> list[str]:
    """report.md's section on a tournament's result against its own pods (nothing for other runs)."""
    if record is None:
        return []
    lines = [
        "## The result against its own pods",
        "",
        (
            "Every finished pod is a draw of the tournament's search (its own seed and hyperparameters). "
            "Where the tournament's result stands among them: its rank, the share of the pods it is "
            "at or above, and the pods' median, interquartile mean, mean of the lowest 10% and best "
            "(docs/tournament.md)."
        ),
        "",
    ]
    rows = spread_rows(record)
    if rows:
        lines.append("| " + " | ".join(SPREAD_HEADER) + " |")
        lines.append("|" + "|".join(["---"] + ["---:"] * (len(SPREAD_HEADER) - 1)) + "|")
        lines.extend("| " + " | ".join(r) + " |" for r in rows)
        lines.append("")
    lines.extend([*(f"- {text}" for text in record["sentences"]), ""])
    return lines


def market_section(result: BacktestResult) -> list[str]:
    """report.md's section against the benchmark and the yardsticks (nothing when it has neither)."""
    header, rows = market_rows(result)
    verdicts = yardstick_lines(result)
    if not rows and not verdicts:
        return []
    lines = ["## Against the market and the yardsticks", ""]
    if rows:
        lines.extend(
            [
                f"Each strategy's daily returns regressed on the benchmark's ({result.benchmark_name or 'benchmark'}, "
                "the index itself): beta, alpha a year with its 95% interval (least squares), tracking error and "
                "information ratio (of the returns less the benchmark's, a year) and the correlation. A "
                "dollar-neutral book has a beta near 0; its alpha is most of its return.",
                "",
                "| " + " | ".join(header) + " |",
                "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|",
                *("| " + " | ".join(r) + " |" for r in rows),
                "",
            ]
        )
    if verdicts:
        lines.extend(
            [
                "Each agent against the classical factor portfolios of its own kind (docs/yardsticks.md): a "
                "dollar-neutral book against the long-short yardsticks, a long one against the long-only ones; "
                "the Sharpe ratios' difference tested on the same days (Jobson-Korkie with Memmel's correction).",
                "",
                *(f"- {text}" for text in verdicts),
                "",
            ]
        )
    return lines


def membership_lines(membership: dict[str, Any] | None) -> list[str]:
    """A point-in-time universe in words: how many members changed over the data set's
    window and in the period (`BacktestResult.membership`); none without one."""
    if not membership:
        return []

    def changes(part: dict[str, Any]) -> str:
        names = [f"{kind} {', '.join(part[kind])}" for kind in ("joined", "left") if part.get(kind)]
        return f"{part['changes']}" + (f" ({'; '.join(names)})" if names else "")

    period = membership.get("period")
    lines = [
        f"Point-in-time universe ({membership['file']}): {membership['members']} tickers were members in the data "
        f"set's window; membership changes in it: {changes(membership)}. A ticker is traded only while it is a member.",
        "Membership changes in this period: "
        + (
            changes(period)
            if period is not None
            else "not known (the cached panel predates dated membership events; rebuild it)"
        ),
    ]
    if membership.get("unserved"):
        names = membership["unserved"]
        lines.append(
            f"Members the data source does not serve: {len(names)} ({', '.join(names[:10])}"
            f"{', ...' if len(names) > 10 else ''}), {100 * membership['unserved_share']:.1f}% of the "
            "window's member-days: the universe traded is that much smaller than the index."
        )
    return lines


def membership_section(result: BacktestResult) -> list[str]:
    """report.md's universe section: `membership_lines` as a list, or nothing."""
    lines = membership_lines(result.membership)
    return ["## Universe", "", *(f"- {text}" for text in lines), ""] if lines else []


def training_line(training: dict[str, Any]) -> str:
    """A library row's training in words: budget terms, env steps, seconds, samples/s."""
    steps, seconds = int(training.get("steps") or 0), float(training.get("seconds") or 0.0)
    rate = steps / seconds if seconds > 0 else float("nan")
    return (
        f"{training.get('budget', {}).get('terms', 'budget not recorded')}; {steps:,} env steps in "
        f"{seconds:,.0f} s ({rate:,.0f} samples/s); {training.get('trained_with') or training.get('library', '?')}"
    )


def _breakeven_sentence(result: BacktestResult) -> str:
    if not result.breakeven:
        return "the breakeven cost was not computed (no multiples of the cost model were run, or it charges nothing)."
    multiples = next(iter(result.breakeven.values()))["multiples"]
    return (
        "the breakeven cost: the multiple of the cost model at which the Sharpe ratio reaches 0, interpolated "
        f"between the backtests at {', '.join(f'{k:g}' for k in multiples)} x the costs (run in one pass)."
    )


def _json_number(value: Any) -> Any:
    """NaN and infinities as null (strict JSON), other numbers as floats."""
    value = float(value)
    return value if math.isfinite(value) else None


def report_dict(result: BacktestResult) -> dict[str, Any]:
    """report.json's content."""
    return {
        "dataset": result.dataset,
        "benchmark": result.benchmark_name,
        "missing_columns": list(result.missing_columns),
        "tickers": list(result.tickers),
        "period": result.period.as_dict(),
        "config": result.config,
        "strategies": [
            {
                "name": s.name,
                "label": s.label,
                "kind": s.kind,
                "source": s.source,
                "series": f"backtests/{s.name}.parquet",
                **({"training": s.training} if s.training is not None else {}),
            }
            for s in result.strategies.values()
        ],
        "order": [str(name) for name in result.metrics.index],
        "best": result.best,
        "metrics": {
            str(name): {column: _json_number(value) for column, value in row.items()}
            for name, row in result.metrics.iterrows()
        },
        "evidence": result.evidence,
        "selection": result.selection,
        "spread": result.spread,
        "cost_model": result.cost_model,
        "costs": {
            name: {k: None if v is None else _json_number(v) for k, v in row.items()}
            for name, row in result.costs.items()
        },
        "breakeven": {
            name: {**row, "multiple": None if row["multiple"] is None else _json_number(row["multiple"])}
            for name, row in result.breakeven.items()
        },
        "membership": result.membership,
        "versus_benchmark": result.versus_benchmark,
        "versus_yardsticks": result.versus_yardsticks,
    }


def series_table(result: BacktestResult, name: str) -> pa.Table:
    """One strategy's series as an Arrow table with a fixed-size-list positions column."""
    frame = result.series[name]
    positions = result.positions[name]
    width = positions.shape[1]
    recorded = frame.index.isin(positions.index)
    flat = np.zeros((len(frame), width), dtype=np.float64)
    flat[recorded] = positions.reindex(frame.index[recorded]).to_numpy(dtype=np.float64)
    column = pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), width, mask=pa.array(~recorded))
    arrays = {"timestamp": pa.array(frame.index)}
    arrays.update({c: pa.array(frame[c].to_numpy(dtype=np.float64)) for c in SERIES_COLUMNS})
    arrays["positions"] = column
    metadata = {"tickers": json.dumps([str(c) for c in positions.columns]), "strategy": name}
    return pa.table(arrays).replace_schema_metadata(metadata)


def read_series(path: str | os.PathLike[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read `backtests/<strategy>.parquet` back: (series by timestamp, positions by timestamp)."""
    table = pq.read_table(path)
    tickers = json.loads(table.schema.metadata[b"tickers"])
    frame = table.drop(["positions"]).to_pandas().set_index("timestamp")
    column = table.column("positions").combine_chunks()
    valid = ~np.asarray(column.is_null().to_numpy(zero_copy_only=False))
    values = column.flatten().to_numpy().reshape(-1, len(tickers)) if len(column) else np.empty((0, len(tickers)))
    positions = pd.DataFrame(values, index=frame.index[valid], columns=tickers)
    return frame, positions


def write_report(
    result: BacktestResult,
    run_dir: str | os.PathLike[str],
    tear_sheet: bool = True,
    dataset_card: dict[str, Any] | None = None,
) -> dict[str, Path]:
    """Write series, report.json, report.md, the tear sheet and ``dataset.json`` (the
    data set's `MarketData.describe`, when given); return name -> path."""
    root = Path(run_dir)
    files: dict[str, Path] = {}
    for name in result.series:
        files[f"series:{name}"] = rundir.write_parquet(
            root / rundir.BACKTESTS_DIR / f"{name}.parquet", series_table(result, name)
        )
    for name, trades in result.trades.items():
        files[f"trades:{name}"] = rundir.write_parquet(root / rundir.TRADES_DIR / f"{name}.parquet", trades)
    if tear_sheet:
        for name in tear_sheet_strategies(result):
            files[f"tear_sheet:{name}"] = write_tear_sheet(result, name, root / f"tearsheet_{name}.png")
    report = report_dict(result)
    report["files"] = {key: str(path.relative_to(root)) for key, path in files.items()}
    files["report.json"] = rundir.write_json(root / rundir.REPORT_JSON, report)
    files["report.md"] = rundir.write_text(root / rundir.REPORT_MD, markdown_report(result))
    if dataset_card is not None:
        files["dataset.json"] = rundir.write_json(root / rundir.DATASET, dataset_card)
    _remove_stale(root, set(files.values()))
    return files


def _remove_stale(root: Path, written: set[Path]) -> None:
    """A report replaces the one before it whole: the series, trade lists and tear sheets of
    strategies it no longer has are removed (only files of those kinds, which only this module writes)."""
    for path in [
        *(root / rundir.BACKTESTS_DIR).glob("*.parquet"),
        *(root / rundir.TRADES_DIR).glob("*.parquet"),
        *root.glob("tearsheet_*.png"),
    ]:
        if path not in written and not rundir.is_temporary(path):
            path.unlink(missing_ok=True)


MAX_TEAR_SHEETS = 8
"""Tear sheets drawn per backtest at most (a population of 64 policies would take
minutes): the agents with the best Sharpe ratios."""


def tear_sheet_strategies(result: BacktestResult) -> list[str]:
    """The agents (kind "policy" or "library") that get a tear sheet, best Sharpe first;
    the benchmark, equal-weight and the oracle are the yardsticks, not subjects."""
    agents = [name for name in result.metrics.index if result.strategies[name].kind in ("policy", "library")]
    return agents[:MAX_TEAR_SHEETS]


def write_tear_sheet(result: BacktestResult, name: str, path: Path) -> Path:
    """pyfolio-reloaded's returns tear sheet of strategy `name` against the benchmark, as PNG (Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        import pyfolio

        returns = _utc_daily(result.daily_returns[name])
        benchmark = None
        if "benchmark" in result.daily_returns.columns and name != "benchmark":
            benchmark = _utc_daily(result.daily_returns["benchmark"])
        figure = pyfolio.create_returns_tear_sheet(returns, benchmark_rets=benchmark, return_fig=True)
        figure.suptitle(f"{result.labels()[name]} - {result.dataset}, {result.period.name}", y=1.0)
        rundir.write_atomic(path, lambda tmp: figure.savefig(tmp, format="png", dpi=72, bbox_inches="tight"))
        plt.close(figure)
    return path


def _utc_daily(returns: pd.Series) -> pd.Series:
    """Daily returns on a UTC midnight index, as pyfolio expects."""
    series = returns.astype(float).fillna(0.0)
    series.index = pd.DatetimeIndex(series.index).tz_localize("UTC")
    return series
