"""The synthetic market's frictions for learning under costs (issue 40): a bid-ask bounce that the
high-low spread estimator reads, and Student-t shocks with fat tails; both off by default."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from market_envs.costs import abdi_ranaldo_half_spread
from market_envs.data.synthetic import MarketModel, synthetic
from trader.errors import ConfigError


def _panel(**model):
    return synthetic(8, "2023-01-03", "2023-02-01", seed=2, model=model or None)


def test_the_bounce_keeps_high_and_low_outside_open_and_close_and_the_estimator_reads_it():
    data = _panel(half_spread_bps=1.5)
    high, low = data.feature("high").double(), data.feature("low").double()
    open_, close = data.open.double(), data.close.double()
    assert (high >= torch.maximum(open_, close)).all() and (low <= torch.minimum(open_, close)).all()
    estimate = abdi_ranaldo_half_spread(high, low, close, 390)[400:]  # [T, N], a fraction of the price
    assert float(estimate.median()) * 1e4 == pytest.approx(1.5, rel=0.25)
    plain = _panel()
    mids = abdi_ranaldo_half_spread(
        plain.feature("high").double(), plain.feature("low").double(), plain.close.double(), 390
    )[400:]
    assert float(mids.median()) * 1e4 < 0.8  # without the bounce the estimator finds far less


def test_student_t_shocks_have_fatter_tails_than_normal_ones():
    def kurtosis(data) -> float:
        r = np.diff(np.log(data.close.double().numpy()), axis=0)
        r = (r - r.mean(0)) / r.std(0)
        return float((r**4).mean())

    assert kurtosis(_panel(tail_df=4.0)) > kurtosis(_panel()) + 1.0


def test_the_defaults_leave_the_market_as_it_was():
    assert MarketModel().tail_df is None and MarketModel().half_spread_bps == 0.0
    explicit = _panel(tail_df=None, half_spread_bps=0.0)
    assert torch.equal(explicit.features, _panel().features)


@pytest.mark.parametrize(
    ("values", "fragment"), [(dict(tail_df=2.0), "tail_df"), (dict(half_spread_bps=-1.0), "half_spread_bps")]
)
def test_bad_frictions_are_refused(values, fragment):
    with pytest.raises(ConfigError, match=fragment):
        MarketModel(**values)
