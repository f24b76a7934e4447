"""No speculation: plain autoregressive decoding, a method like the others (`method.py`)."""
