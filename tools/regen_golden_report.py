"""Regenerate tests/golden/backtest_report.json: the golden backtest report.

Run after a deliberate change to the env's trading rules, the baselines or the
metrics, and say why in the commit:

    OMP_NUM_THREADS=1 .venv/bin/python tools/regen_golden_report.py

The case (seeded panel, fixed linear policies) lives in tests/golden/case.py, so
the test and this script build exactly the same backtest.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "backtest_report.json"


def main() -> int:
    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT / "tests"))
    from golden.case import golden_inputs, golden_report

    from trader.backtesting import BacktestConfig, run_backtest
    from trader.backtesting.report import report_dict

    data, policies = golden_inputs()
    with tempfile.TemporaryDirectory() as scratch:
        result = run_backtest(data, policies, period="test", config=BacktestConfig(tear_sheet=False), run_dir=scratch)
    pinned = golden_report(report_dict(result))
    GOLDEN.write_text(json.dumps(pinned, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {GOLDEN.relative_to(ROOT)}: best {pinned['best']}, order {pinned['order']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
