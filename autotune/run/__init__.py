"""How trials run: the plan (a run resolved once), the trial Trainer, feasibility pre-checks and
the search driver."""
