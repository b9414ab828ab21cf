"""The study's answer: its model (`model`), the configurations it can hand back (`choices`) and
the decision (`decide`). Reads the store's records; imports no driver."""
