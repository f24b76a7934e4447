"""The Python-backend models' code. `model.py` is the bootstrap copied into every model's version
folder; it reads the model's config parameters, puts the project's paths on sys.path (the stub ignores
PYTHONPATH) and hands over to the implementation module named there."""
