"""What the store holds, typed: `TrialRecord` (`records.trial`) and `StudyRecord`
(`records.study`, the study's answer as its stored dict).

optuna keeps a trial's and a study's facts as flat user attrs (JSON values under string keys), and
optuna's CLI and dashboard read them there. This package is the one place that spells those keys:
each field of a record names its stored key in its metadata (`records.keys`), and `trial_record`
and `study_record` read a trial's or a study's attrs into frozen, typed records grouped by what
they hold. Writers go through `study_attrs` (a study's facts) and `write_trial`.

Schema versions (`autotune.schema`): stores written before ``schema_version`` was stored are
version 0; everything a version 0 store holds is read the same way (an answer missing from it is
decided again from its finalists). A newer store than this code knows is refused by
`autotune.schema.check_schema`. Pure: no optuna, no torch.
"""

from __future__ import annotations

from autotune.records.study import (
    BASELINE,
    BASELINE_AGAIN,
    Baseline,
    FinalistRecord,
    StudyRecord,
    add_activation_probes,
    add_whole_run,
    read_study,
    study_attrs,
    study_record,
    write_study,
)
from autotune.records.trial import (
    OWNER_KEY,
    RAY_TRIAL_KEY,
    WHOLE_RUN_STEPS,
    CompileRecord,
    Failure,
    Measurement,
    MemoryRecord,
    ScreeningRecord,
    TrialRecord,
    WholeRun,
    WholeRunFindings,
    concluded,
    measured_record,
    queued_params,
    read_trial,
    trial_attrs,
    trial_facts,
    trial_record,
    write_trial,
)

__all__ = [
    "BASELINE",
    "BASELINE_AGAIN",
    "OWNER_KEY",
    "RAY_TRIAL_KEY",
    "WHOLE_RUN_STEPS",
    "Baseline",
    "CompileRecord",
    "Failure",
    "FinalistRecord",
    "Measurement",
    "MemoryRecord",
    "ScreeningRecord",
    "StudyRecord",
    "TrialRecord",
    "WholeRun",
    "WholeRunFindings",
    "add_activation_probes",
    "add_whole_run",
    "concluded",
    "measured_record",
    "queued_params",
    "read_study",
    "read_trial",
    "study_attrs",
    "study_record",
    "trial_attrs",
    "trial_facts",
    "trial_record",
    "write_study",
    "write_trial",
]
