"""What runs inside one process for one trial: the job and its messages, the process's start,
the trial `Trainer`, the pre-checks, and why a trial ended."""
