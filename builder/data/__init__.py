"""Data that ships inside installed packages or the interpreter (no downloads at run time): HumanEval prompts
(`humaneval`), the standard-library text corpus (`corpus`: calibration's `builtin:stdlib`, the tiny fixture's
training text)."""
