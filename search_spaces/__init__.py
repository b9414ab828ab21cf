"""Search spaces shipped with autotune (YAML files beside this one); see `autotune.space`."""
