"""Where a job runs, behind one interface (`base.Executor`): this process (`inprocess`), a
forkserver worker (`forkserver`), a torchrun group (`torchrun`), a Ray actor (`ray`)."""
