"""The tournament: a population of PPO, SAC and TD3 pods trained on dask, ranked on a
leaderboard, bred by a generator; at the end its result, the best pod or an ensemble of
the pods that earned a place, whichever won on validation.

One module per role: `pod` (one `trader.train` run), `leaderboard`, `events` (the
log), `generator`, `orchestrator` (`run`), `cluster` (the dask `Client`),
`selection` (the result and its ensemble; the ensemble policy itself is
`trader.agents.ensemble`'s), and `config` (`TournamentConfig`). ``tournament.run(config)`` is the API,
``trader tournament`` its CLI.
"""

from __future__ import annotations

from tournament.config import TournamentConfig
from tournament.orchestrator import Progress, TournamentResult, run

__all__ = ["Progress", "TournamentConfig", "TournamentResult", "run"]
