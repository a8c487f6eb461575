"""The CLI's back-ends: offline restores and checkpoints, store inspection, status, topics."""
