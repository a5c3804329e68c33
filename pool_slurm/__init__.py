"""pool_slurm: Pool governs a Slurm cluster (docs/SLURM.md). A GPU job in a
governed partition runs only once Pool admits a claim for it; Pool's
preemptions and reclamations reach the job; every job carries its joules.

It imports nothing of the scheduler's (agent/ and scheduler/ never import it)."""
