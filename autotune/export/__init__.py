"""A study's answer exported: the config (`config`), its words (`words`) and one renderer per
format (`formats`, `launchers`). Reads the store; imports no driver."""
