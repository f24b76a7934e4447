"""Data that ships inside installed packages (no downloads at run time): HumanEval prompts."""
