"""Where results live: the optuna store, study fingerprints, export and report (they read the store only)."""
