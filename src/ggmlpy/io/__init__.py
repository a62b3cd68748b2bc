"""Files: the GGUF container (read and validated here; written through the gguf package), and model files."""
