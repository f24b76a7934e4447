"""eagle."""
