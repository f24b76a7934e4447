"""tree_verify."""
