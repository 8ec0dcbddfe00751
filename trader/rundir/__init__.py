"""The run directory: every file of a run, how it is written, and how it is read.

A run directory (``runs/<name>/``) is the contract between the stages: training,
the tournament, the backtest, the baselines and the dashboard meet only through its
files. This package is that contract in code, one module per role (`files`, `claims`,
`reports`, `contents`, `writes`, `reads`, `trials`, `codec`), every public name imported
here: ``from trader import rundir; rundir.write_json(...)``; docs/contracts.md describes each
file's fields and points here.

- **Names and versions.** `FILES` lists every file a stage writes, its format, its
  schema version, its writer and its readers. The constants below are the names every
  stage uses; nothing else spells them.
- **Writes, whole or not at all.** `write_text`, `write_json`, `write_toml`,
  `write_parquet` and `write_atomic` write under a temporary name in the same folder,
  flush it to disk, then rename it into place; `stage_folder` and `commit_folder` do
  the same for a folder, and `commit_folder_once` commits only where no folder is yet
  (the first of several writers wins). A reader (or a killed writer) never leaves or
  sees half a file.
- **Logs.** `append_json_line` appends one synced line to ``events.jsonl``;
  `read_json_lines` reads the complete ones back.
- **Reads that name the file.** `read_text`, `read_json`, `read_toml` and
  `read_parquet` turn a missing, half-written or corrupt file into one
  `RunFileError` naming the file and what is wrong.
- **Claiming a folder.** `check_new_run` is the one check every command that starts a
  run calls: a folder that holds anything is refused with one line naming the option
  that resumes or writes elsewhere; `clear_run` (``--overwrite``) removes a run whole,
  and never a file that no stage writes (`foreign_files`).
- **Reading a run.** `run_kind` decides what a folder records (a training run, a
  tournament, baselines only, a walk-forward, an experiment), once for the backtest and
  the dashboard; `check_one_run` refuses a folder of several runs where one is read; `checkpoints`, `best_step`, `baseline_folders`, `read_baseline`,
  `recorded_env`, `recorded_rules`, `fold_dir`, `fold_folders` and `read_fold` read its
  parts (`trader.backtesting.runs.read_run` gathers what a backtest needs from them).
- **Reports.** A run's own backtest report lies at its top; any other in
  ``reports/<name>/``; `reports` lists them (`trader.backtesting.runs` decides which).
- **The config codec.** `config_to_dict` / `config_from_dict` turn a frozen
  dataclass config into a JSON/TOML-able dict and back (nested dataclasses
  included); `toml_ready` makes such a dict writable as TOML.

Torch-free on purpose: the dashboard imports it to read runs.
"""

from trader.rundir.files import (
    BACKTESTS_DIR,
    BASELINES_DIR,
    BASELINE_SIDECAR,
    BASELINE_VERSION,
    CHECKPOINTS,
    CHECKPOINT_VERSION,
    CONFIG,
    DATASET,
    ENSEMBLE_TRIAL,
    ERROR,
    EVENTS,
    EXPERIMENT,
    EXPERIMENT_COLUMNS,
    EXPERIMENT_DATASET,
    EXPERIMENT_FIGURE,
    EXPERIMENT_JSON,
    EXPERIMENT_PLOT,
    EXPERIMENT_TABLE,
    EXPERIMENT_VERSION,
    FILES,
    LEADERBOARD,
    LEADERBOARD_VERSION,
    MARKERS,
    METRICS,
    PAPER_DIR,
    PAPER_JOURNAL,
    PAPER_PENDING,
    PAPER_SESSION,
    PAPER_VERSION,
    PODS,
    PODS_DIR,
    POD_RESULT,
    POD_RESULT_VERSION,
    REPORTS_DIR,
    REPORT_JSON,
    REPORT_MD,
    RESUME_DIR,
    RESUME_POINT,
    RESUME_RUNNER,
    SELECTION,
    SELECTION_VERSION,
    SERIES_COLUMNS,
    SNAPSHOTS,
    TOURNAMENT,
    TRADES_DIR,
    TRIALS,
    WF_CONFIG,
    WF_FOLD,
    WF_FOLDS_DIR,
    WF_FOLD_VERSION,
    WF_REPORT_JSON,
    WF_REPORT_MD,
    WF_REPORT_VERSION,
    WF_STITCHED,
    RunFile,
    RunFileError,
    file_kind,
    files_table,
    is_temporary,
)
from trader.rundir.claims import check_new_run, claim_run, clear_run, foreign_files, run_entries
from trader.rundir.reports import Report, report_folder, reports
from trader.rundir.contents import (
    RUN_KINDS,
    baseline_folders,
    best_step,
    check_one_run,
    checkpoints,
    env_table,
    fold_dir,
    fold_folders,
    read_baseline,
    read_fold,
    recorded_env,
    recorded_rules,
    run_kind,
)
from trader.rundir.writes import (
    append_json_line,
    commit_folder,
    commit_folder_once,
    file_mode,
    make_folder,
    remove_staged,
    repair_json_lines,
    stage_folder,
    write_atomic,
    write_json,
    write_parquet,
    write_text,
    write_toml,
)
from trader.rundir.reads import read_json, read_json_lines, read_parquet, read_text, read_toml, require_keys
from trader.rundir.trials import TRIAL_KEYS, read_trials, trials_frame
from trader.rundir.codec import config_from_dict, config_to_dict, json_ready, replace_config, toml_ready

__all__ = [
    "BACKTESTS_DIR",
    "BASELINES_DIR",
    "BASELINE_SIDECAR",
    "BASELINE_VERSION",
    "CHECKPOINTS",
    "CHECKPOINT_VERSION",
    "CONFIG",
    "DATASET",
    "ENSEMBLE_TRIAL",
    "ERROR",
    "EVENTS",
    "EXPERIMENT",
    "EXPERIMENT_COLUMNS",
    "EXPERIMENT_DATASET",
    "EXPERIMENT_FIGURE",
    "EXPERIMENT_JSON",
    "EXPERIMENT_PLOT",
    "EXPERIMENT_TABLE",
    "EXPERIMENT_VERSION",
    "FILES",
    "LEADERBOARD",
    "LEADERBOARD_VERSION",
    "MARKERS",
    "METRICS",
    "PAPER_DIR",
    "PAPER_JOURNAL",
    "PAPER_PENDING",
    "PAPER_SESSION",
    "PAPER_VERSION",
    "PODS",
    "PODS_DIR",
    "POD_RESULT",
    "POD_RESULT_VERSION",
    "REPORTS_DIR",
    "REPORT_JSON",
    "REPORT_MD",
    "RESUME_DIR",
    "RESUME_POINT",
    "RESUME_RUNNER",
    "RUN_KINDS",
    "Report",
    "RunFile",
    "RunFileError",
    "SELECTION",
    "SELECTION_VERSION",
    "SERIES_COLUMNS",
    "SNAPSHOTS",
    "TOURNAMENT",
    "TRADES_DIR",
    "TRIALS",
    "TRIAL_KEYS",
    "WF_CONFIG",
    "WF_FOLD",
    "WF_FOLDS_DIR",
    "WF_FOLD_VERSION",
    "WF_REPORT_JSON",
    "WF_REPORT_MD",
    "WF_REPORT_VERSION",
    "WF_STITCHED",
    "append_json_line",
    "baseline_folders",
    "best_step",
    "check_new_run",
    "check_one_run",
    "checkpoints",
    "claim_run",
    "clear_run",
    "commit_folder",
    "commit_folder_once",
    "config_from_dict",
    "config_to_dict",
    "env_table",
    "file_kind",
    "file_mode",
    "files_table",
    "fold_dir",
    "fold_folders",
    "foreign_files",
    "is_temporary",
    "json_ready",
    "make_folder",
    "read_baseline",
    "read_fold",
    "read_json",
    "read_json_lines",
    "read_parquet",
    "read_text",
    "read_toml",
    "read_trials",
    "recorded_env",
    "recorded_rules",
    "remove_staged",
    "repair_json_lines",
    "replace_config",
    "report_folder",
    "reports",
    "require_keys",
    "run_entries",
    "run_kind",
    "stage_folder",
    "toml_ready",
    "trials_frame",
    "write_atomic",
    "write_json",
    "write_parquet",
    "write_text",
    "write_toml",
]
