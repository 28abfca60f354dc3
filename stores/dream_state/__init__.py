"""What dream cycles keep between runs: the undo ledger, dream settings, cluster state."""
