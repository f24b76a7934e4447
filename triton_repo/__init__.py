"""triton_repo."""
