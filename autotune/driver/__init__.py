"""The search driver: the supervisor's loop over an executor, the study it fills, the baseline and the
finalists around it, and what it hands back (`search.search`, `tune.tune`, `pool.join_study`)."""
